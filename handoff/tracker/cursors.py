"""Opaque keyset cursors: the sort key of the last row of a page.

A cursor is base64url (no padding) of a small JSON array; clients pass it
back as ``after`` unchanged. Decoding is strict, because a cursor's parts
become statement parameters: each part must have exactly the JSON type
its listing gave out (``true`` is not a number, ``1.0`` is not an integer),
ids within the naming rule's length, numbers and times within the range the
database and Python can hold. Anything else is InvalidRequest (422).
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime

import orjson

from handoff.core.errors import InvalidRequest
from handoff.core.micros import from_micros, to_micros
from handoff.core.names import ID_MAX

# Before every real timestamp: the key of "no cursor yet".
START_AT = datetime(1, 1, 1, tzinfo=UTC)
END_AT = datetime(9999, 12, 31, tzinfo=UTC)
_MICROS = (to_micros(START_AT), to_micros(END_AT))
NUMBER_MAX = 2**62  # ids and versions stay below it (bigint), and so do cursors
RUN_MAX = 2**31 - 1
MAX_LENGTH = 400  # characters of an ``after`` parameter (documented in the API)
FORMAT = (
    "an opaque string of at most 400 characters: pass the `next` of the previous page "
    "unchanged (base64url of a small JSON array)"
)


def _encode(parts: list[object]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(parts)).rstrip(b"=").decode()


def _not_ours(text: str) -> InvalidRequest:
    return InvalidRequest(f"after: {text[:40]!r} is not a cursor this listing gave out")


def _decode(text: str, shape: tuple[type, ...]) -> list[object]:
    """The parts of a cursor of ``shape`` (exact JSON types), or InvalidRequest."""
    if len(text) > MAX_LENGTH:
        raise _not_ours(text)
    try:
        value = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise _not_ours(text) from exc
    # type() and not isinstance(): bool is a subclass of int in Python.
    if (
        not isinstance(value, list)
        or len(value) != len(shape)
        or any(type(part) is not kind for part, kind in zip(value, shape, strict=True))
    ):
        raise _not_ours(text)
    return value


def _within(text: str, value: object, low: int, high: int) -> int:
    assert isinstance(value, int)
    if not low <= value <= high:
        raise _not_ours(text)
    return value


def _document(text: str, value: object) -> str:
    assert isinstance(value, str)
    if len(value) > ID_MAX:
        raise _not_ours(text)
    return value


def time_key(at: datetime, document_id: str) -> str:
    """Cursor after (timestamp, document id): owner and overdue pages."""
    return _encode([to_micros(at), document_id])


def parse_time_key(text: str | None) -> tuple[datetime, str]:
    if text is None:
        return START_AT, ""
    micros, document_id = _decode(text, (int, str))
    at = from_micros(_within(text, micros, *_MICROS))
    return at, _document(text, document_id)


def number_key(value: int) -> str:
    """Cursor after a number: history versions, rejection ids."""
    return _encode([value])


def parse_number_key(text: str | None, start: int) -> int:
    if text is None:
        return start
    (number,) = _decode(text, (int,))
    return _within(text, number, 0, NUMBER_MAX - 1)


def parse_time_key_desc(text: str | None) -> tuple[datetime, str]:
    """``parse_time_key`` for newest-first listings: no cursor starts after the end of time."""
    return (END_AT, "") if text is None else parse_time_key(text)


def id_key(document_id: str, run_id: int) -> str:
    """Cursor after (document id, run): listings in id order."""
    return _encode([document_id, run_id])


def parse_id_key(text: str | None) -> tuple[str, int]:
    if text is None:
        return "", 0
    document_id, run_id = _decode(text, (str, int))
    return _document(text, document_id), _within(text, run_id, 0, RUN_MAX)
