"""A request's fingerprint, computed as the emit function in PostgreSQL computes it.

The emit function hashes the canonical text of a jsonb object (SHA-256 of
``jsonb::text``). The DynamoDB store hashes the same request the same way
here, so a receipt ported between the stores (``handoff import|export
dynamodb``) still recognises an identical retry, and still refuses the same
event id with other content.

jsonb's canonical text, as PostgreSQL prints it:

- object keys sorted by their length in bytes, then bytewise; ``": "`` and
  ``", "`` between items;
- strings with ``"`` ``\\`` and control characters escaped (``\\b \\f \\n \\r \\t``,
  the rest as lower-case ``\\u00xx``), everything else as UTF-8;
- numbers as ``numeric`` prints them: the JSON the client library sends
  (Python's ``repr`` of a float) parsed into a decimal shown at its own scale,
  so ``1e-07`` prints as ``0.0000001`` and ``-0.0`` as ``0.0``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from decimal import Decimal
from typing import Any

from handoff.core.micros import to_micros

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
            "\t": "\\t"}  # fmt: skip


def _string(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _number(value: Decimal) -> str:
    text = format(value, "f")
    return text[1:] if value.is_zero() and text.startswith("-") else text  # numeric has no -0


def jsonb_text(value: Any) -> str:
    """``value::jsonb::text`` for a value made of JSON types (and Decimal)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(Decimal(repr(value)))
    if isinstance(value, Decimal):
        return _number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{_string(k)}: {jsonb_text(value[k])}" for k in keys) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def epoch(at: datetime) -> Decimal:
    """``extract(epoch FROM at)``: seconds since 1970 at microsecond scale."""
    micros = to_micros(at)
    sign = "-" if micros < 0 else ""
    whole, part = divmod(abs(micros), 1_000_000)
    return Decimal(f"{sign}{whole}.{part:06d}")


def request_fingerprint(request: dict[str, Any]) -> bytes:
    """SHA-256 of the request's canonical jsonb text: the receipts' fingerprint."""
    return hashlib.sha256(jsonb_text(request).encode()).digest()
