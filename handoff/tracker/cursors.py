"""Opaque keyset cursors: the sort key of the last row of a page.

A cursor is base64url of a small JSON array; clients pass it back as
``after`` unchanged. Anything else is answered with InvalidRequest.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime

import orjson

from handoff.core.errors import InvalidRequest
from handoff.core.micros import from_micros, to_micros

# Before every real timestamp: the key of "no cursor yet".
START_AT = datetime(1, 1, 1, tzinfo=UTC)
END_AT = datetime(9999, 12, 31, tzinfo=UTC)


def _encode(parts: list[object]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(parts)).rstrip(b"=").decode()


def _decode(text: str) -> list[object]:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"after: {text[:40]!r} is not a cursor this API gave out") from exc
    if not isinstance(value, list):
        raise InvalidRequest(f"after: {text[:40]!r} is not a cursor this API gave out")
    return value


def time_key(at: datetime, document_id: str) -> str:
    """Cursor after (timestamp, document id): owner and overdue pages."""
    return _encode([to_micros(at), document_id])


def parse_time_key(text: str | None) -> tuple[datetime, str]:
    if text is None:
        return START_AT, ""
    parts = _decode(text)
    if len(parts) != 2 or not isinstance(parts[0], int) or not isinstance(parts[1], str):
        raise InvalidRequest(f"after: {text[:40]!r} is not a cursor of this listing")
    try:
        at = from_micros(parts[0])
    except OverflowError as exc:
        raise InvalidRequest(f"after: {text[:40]!r} is out of range") from exc
    return at, parts[1]


def number_key(value: int) -> str:
    """Cursor after a number: history versions, rejection ids."""
    return _encode([value])


def parse_number_key(text: str | None, start: int) -> int:
    if text is None:
        return start
    parts = _decode(text)
    if len(parts) != 1 or not isinstance(parts[0], int) or not 0 <= parts[0] < 2**62:
        raise InvalidRequest(f"after: {text[:40]!r} is not a cursor of this listing")
    return parts[0]


def parse_time_key_desc(text: str | None) -> tuple[datetime, str]:
    """``parse_time_key`` for newest-first listings: no cursor starts after the end of time."""
    return (END_AT, "") if text is None else parse_time_key(text)


def id_key(document_id: str, run_id: int) -> str:
    """Cursor after (document id, run): listings in id order."""
    return _encode([document_id, run_id])


def parse_id_key(text: str | None) -> tuple[str, int]:
    if text is None:
        return "", 0
    parts = _decode(text)
    if len(parts) != 2 or not isinstance(parts[0], str) or not isinstance(parts[1], int):
        raise InvalidRequest(f"after: {text[:40]!r} is not a cursor of this listing")
    return parts[0], parts[1]
