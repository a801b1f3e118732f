"""Timestamps as microseconds since the Unix epoch.

The one integer form Handoff uses for time on the wire: Avro's
``timestamp-micros`` in events (and so in the outbox payload), and the
tracker's page cursors.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE = timedelta(microseconds=1)


def to_micros(at: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - EPOCH) // _ONE


def from_micros(micros: int) -> datetime:
    """The UTC datetime; OverflowError outside datetime's range."""
    return EPOCH + micros * _ONE
