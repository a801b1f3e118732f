"""The naming rule: what tenants, services, owners, ids, event types and statuses may be.

One rule, checked at every entry point: the request models (HTTP and the
Python client), the CLI, and again in the database for direct SQL callers
(``handoff._id_problem`` and ``handoff._label_problem`` in handoff/sql/contract.sql,
which a test compares with this module code point by code point).

- **Tenants and services** (and so owners): 1-63 characters of ``a-z 0-9 . _ -``,
  starting with a letter or digit. They become PostgreSQL role memberships,
  Kafka header values and URL path segments, so they stay plain ASCII.
- **Document ids, event ids, event types, correlation and causation ids**: 1-200
  characters of any script, in Unicode NFC form, without whitespace, control,
  format (e.g. bidirectional overrides U+202E), surrogate, private-use or
  non-characters, and without ``/``; not ``.`` or ``..``. Why no ``/``: an id is
  one URL path segment (``/v1/documents/{id}``; routers and proxies treat an
  encoded ``%2F`` inconsistently) and the Kafka key is ``tenant/document``,
  which stays unambiguous only if neither part contains one.
- **Statuses** are labels shown to people: 1-64 characters, the same
  characters as ids plus inner spaces (``waiting for review``), and ``/``.
"""

from __future__ import annotations

import re
import unicodedata

SERVICE_NAME_PATTERN = r"[a-z0-9][a-z0-9._-]{0,62}"
_SERVICE_NAME = re.compile(SERVICE_NAME_PATTERN)

ID_MAX = 200
LABEL_MAX = 64

# Code points no id or label may contain: Unicode's control (Cc), format (Cf),
# separator (Zs, Zl, Zp), surrogate (Cs) and private-use (Co) characters and
# the non-characters, as of Unicode 16, with U+0020 SPACE first (labels may
# use it inside). Written out rather than computed from ``unicodedata`` so that
# the database can hold the same list (see the migration) and the rule does not
# move with the Python version; a unit test checks that it still covers every
# such character this Python knows.
FORBIDDEN_RANGES: tuple[tuple[int, int], ...] = (
    (0x20, 0x20),
    (0x0, 0x1F),
    (0x7F, 0xA0),
    (0xAD, 0xAD),
    (0x600, 0x605),
    (0x61C, 0x61C),
    (0x6DD, 0x6DD),
    (0x70F, 0x70F),
    (0x890, 0x891),
    (0x8E2, 0x8E2),
    (0x1680, 0x1680),
    (0x180E, 0x180E),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x205F, 0x2064),
    (0x2066, 0x206F),
    (0x3000, 0x3000),
    (0xD800, 0xF8FF),
    (0xFDD0, 0xFDEF),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0xFFFE, 0xFFFF),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    *((plane + 0xFFFE, plane + 0xFFFF) for plane in range(0x10000, 0xE0000, 0x10000)),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
    (0xEFFFE, 0x10FFFF),
)


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in ranges
    )


_ID_FORBIDDEN = re.compile(f"[{_char_class(FORBIDDEN_RANGES)}/]")
_LABEL_FORBIDDEN = re.compile(f"[{_char_class(FORBIDDEN_RANGES[1:])}]")


def _json_class(ranges: tuple[tuple[int, int], ...]) -> str:
    """A regex character class body for JSON Schema (ECMA-262, no ``u`` flag): the
    Basic Multilingual Plane's ranges, as ``\\uXXXX`` escapes both dialects read."""

    def esc(code: int) -> str:
        return f"\\u{code:04X}"

    return "".join(
        esc(lo) if lo == hi else f"{esc(lo)}-{esc(min(hi, 0xFFFF))}"
        for lo, hi in ranges
        if lo <= 0xFFFF
    )


# The naming rule as JSON Schema patterns, for the OpenAPI document. They state it
# exactly but for what a regex cannot: NFC form, and the forbidden code points
# outside the Basic Multilingual Plane (private use, non-characters, tags); the
# functions above decide. Without lookarounds ("." and ".." by alternation).
_ID_CHAR = f"[^{_json_class(FORBIDDEN_RANGES)}/]"
_ID_FIRST = f"[^{_json_class(FORBIDDEN_RANGES)}/.]"
ID_JSON_PATTERN = (
    f"^(?:{_ID_FIRST}{_ID_CHAR}{{0,{ID_MAX - 1}}}|\\.{_ID_FIRST}{_ID_CHAR}{{0,{ID_MAX - 2}}}"
    f"|\\.\\.{_ID_CHAR}{{1,{ID_MAX - 2}}})$"
)
_LABEL_CHAR = f"[^{_json_class(FORBIDDEN_RANGES[1:])}]"
_LABEL_EDGE = f"[^{_json_class(FORBIDDEN_RANGES)}]"  # no space first or last
LABEL_JSON_PATTERN = f"^{_LABEL_EDGE}(?:{_LABEL_CHAR}{{0,{LABEL_MAX - 2}}}{_LABEL_EDGE})?$"
SERVICE_NAME_JSON_PATTERN = f"^{SERVICE_NAME_PATTERN}$"


def service_name_problem(value: str) -> str | None:
    """Why ``value`` is not a valid tenant or service name, or None."""
    if _SERVICE_NAME.fullmatch(value) is None:
        return (
            "must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit"
        )
    return None


# Unpaired surrogates need no check of their own: FORBIDDEN_RANGES holds them.
_NOT_NFC = "must be in Unicode NFC form (compose accents, e.g. with unicodedata.normalize)"


def id_problem(value: str) -> str | None:
    """Why ``value`` is not a valid document, event, correlation or causation id, or None."""
    if not 1 <= len(value) <= ID_MAX:
        return f"must be 1-{ID_MAX} characters"
    bad = _ID_FORBIDDEN.search(value)
    if bad is not None:
        return (
            f"must not contain {_describe(bad.group())}: ids are one URL path segment "
            "without whitespace, control or formatting characters"
        )
    if value in (".", ".."):
        return "must not be '.' or '..'"
    return None if unicodedata.is_normalized("NFC", value) else _NOT_NFC


def label_problem(value: str) -> str | None:
    """Why ``value`` is not a valid status, or None."""
    if not 1 <= len(value) <= LABEL_MAX:
        return f"must be 1-{LABEL_MAX} characters"
    if value != value.strip(" "):
        return "must not start or end with a space"
    bad = _LABEL_FORBIDDEN.search(value)
    if bad is not None:
        return f"must not contain {_describe(bad.group())}"
    return None if unicodedata.is_normalized("NFC", value) else _NOT_NFC


def _describe(char: str) -> str:
    if char == "/":
        return "'/'"
    try:
        name = unicodedata.name(char)
    except ValueError:
        name = "an unnamed code point"
    return f"U+{ord(char):04X} ({name.lower()})"


def forbidden(code_point: int) -> bool:
    """Whether an id may not contain this code point (``/`` included)."""
    return code_point == ord("/") or any(lo <= code_point <= hi for lo, hi in FORBIDDEN_RANGES)
