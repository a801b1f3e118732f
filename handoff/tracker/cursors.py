"""Keyset cursors: the sort key of the last row of a page, in one documented format.

A cursor is ``<number>`` or ``<number>/<document id>``: the number is a
version or a rejection id, microseconds since the Unix epoch, or a run,
as the listing sorts; the document id follows the first ``/``. Clients pass
a page's ``next`` back as ``after`` unchanged; the format is declared in the
OpenAPI document (``PATTERN``), and every string that matches it is a valid
position: a number beyond what a listing holds is a position before or
after every row (it is clamped), so nothing that fits the pattern is
refused, and nothing that does not (a sign or digit too many, a NUL, more
than 200 characters of id) is accepted (422).

Why a textual form and not base64 of JSON: JSON's types let a crafted cursor
pass ``true`` where a number belongs (Python's bool is an int), which reached
PostgreSQL as ``bigint < boolean``; a regex states this format exactly.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from handoff.core.errors import InvalidRequest
from handoff.core.micros import from_micros, to_micros
from handoff.core.names import ID_MAX

# Before every real timestamp: the key of "no cursor yet".
START_AT = datetime(1, 1, 1, tzinfo=UTC)
END_AT = datetime(9999, 12, 31, tzinfo=UTC)
_MICROS = (to_micros(START_AT), to_micros(END_AT))
NUMBER_MAX = 2**62  # ids and versions stay below it (bigint)
RUN_MAX = 2**31 - 1
DIGITS = 19  # at most: every bigint id and every microsecond of year 9999 fit
PATTERN = f"^-?[0-9]{{1,{DIGITS}}}(/[^\\u0000]{{0,{ID_MAX}}})?$"
MAX_LENGTH = 1 + DIGITS + 1 + ID_MAX
FORMAT = (
    "the `next` of the previous page, unchanged: `<number>` or `<number>/<document id>` "
    "(a version or id, microseconds since the epoch, or a run, as the listing sorts)"
)
_CURSOR = re.compile(PATTERN)


def _parts(text: str) -> tuple[int, str]:
    if len(text) > MAX_LENGTH or _CURSOR.match(text) is None:
        raise InvalidRequest(f"after: {text[:40]!r} is not a cursor: {FORMAT}")
    number, _, document_id = text.partition("/")
    return int(number), document_id


def _clamp(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


def time_key(at: datetime, document_id: str) -> str:
    """Cursor after (timestamp, document id): owner and overdue pages, completed work."""
    return f"{to_micros(at)}/{document_id}"


def parse_time_key(text: str | None) -> tuple[datetime, str]:
    if text is None:
        return START_AT, ""
    micros, document_id = _parts(text)
    return from_micros(_clamp(micros, *_MICROS)), document_id


def parse_time_key_desc(text: str | None) -> tuple[datetime, str]:
    """``parse_time_key`` for newest-first listings: no cursor starts after the end of time."""
    return (END_AT, "") if text is None else parse_time_key(text)


def number_key(value: int) -> str:
    """Cursor after a number: history versions, rejection ids."""
    return str(value)


def parse_number_key(text: str | None, start: int) -> int:
    if text is None:
        return start
    number, _ = _parts(text)
    return _clamp(number, 0, NUMBER_MAX - 1)


def id_key(document_id: str, run_id: int) -> str:
    """Cursor after (document id, run): listings in id order."""
    return f"{run_id}/{document_id}"


def parse_id_key(text: str | None) -> tuple[str, int]:
    if text is None:
        return "", 0
    run_id, document_id = _parts(text)
    return document_id, _clamp(run_id, 0, RUN_MAX)
