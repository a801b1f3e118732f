"""What became of an event: the guard's verdicts and the runtime's own.

The guard (``consumer_begin``, handoff/sql/consumers.sql) answers one verdict per
event; the runtime adds three of its own for set-aside work and failures.
"""

from __future__ import annotations

import enum


class Verdict(enum.StrEnum):
    # The guard's, as its SQL spells them.
    APPLY = "apply"  # the handler runs
    DUPLICATE = "duplicate"  # taken before with the same content: acknowledged
    CONFLICT = "conflict"  # taken before with other content: quarantined
    STALE = "stale"  # older than the consumer's position: acknowledged
    PARK = "park"  # behind a quarantined event of its document: set aside
    GAP = "gap"  # an earlier version is not here yet: set aside, waits
    FUTURE = "future"  # a version the database does not hold: quarantined
    HELD = "held"  # one of a batch's events kept back with its document
    # The runtime's.
    GONE = "gone"  # set-aside work another process of the consumer took first
    WAITING = "waiting"  # set-aside work that must keep waiting
    QUARANTINED = "quarantined"  # failed where retries cannot help

    @property
    def outcome(self) -> str:
        """Its ``handoff_consumer_events_total{outcome}`` label."""
        return _OUTCOMES.get(self, self.value)


_OUTCOMES = {Verdict.APPLY: "applied", Verdict.PARK: "parked", Verdict.CONFLICT: "quarantined"}
