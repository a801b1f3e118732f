"""The relay's fetch floor: where a fetch of pending outbox rows may start."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from handoff.core import outbox_sql as q


class Floor:
    """The lowest outbox id that can still be pending, kept without skipping late commits.

    Every TICK_S the relay notes the last id handed out (V) and the
    transaction horizon (X). When every transaction older than X has ended,
    every row with an id up to V is visible or gone, so the next fetch (which
    starts at the current floor) sees every pending one of them: the floor
    may rise to the lowest of that fetch's first id, the ids in flight, and
    V + 1. It drops back to 0 when slots change hands, and every RESET_S as a
    safety net (a parked row that was repaired, say).
    """

    TICK_S = 0.2
    RESET_S = 30.0

    def __init__(self) -> None:
        self.value = 0
        self._probe: tuple[int, int] | None = None  # (V, X) awaiting the horizon
        self._ready: int | None = None  # V whose rows are all visible now
        self._next_tick = 0.0
        self._next_reset = time.monotonic() + self.RESET_S

    def tick(self, conn: psycopg.Connection[Any], now: float) -> None:
        if now >= self._next_reset:
            self.reset(now)
        if now < self._next_tick:
            return
        self._next_tick = now + self.TICK_S
        row = conn.execute(q.HORIZON).fetchone()
        if row is None or row[2] is None:
            return
        xmin, xmax, last_id = (int(v) for v in row)
        # Keep a probe until it resolves: replaced on every tick, it would
        # never resolve under steady load, where xmin always trails xmax.
        if self._probe is not None and xmin < self._probe[1]:
            return
        if self._probe is not None:
            self._ready = self._probe[0]
        self._probe = (last_id, xmax)

    def after_fetch(self, first_id: int | None, in_flight: list[int]) -> None:
        """``in_flight``: the lowest id of each batch in flight."""
        if self._ready is None:
            return
        bound = self._ready + 1
        if first_id is not None:
            bound = min(bound, first_id)
        if in_flight:
            bound = min(bound, *in_flight)
        self.value = max(self.value, bound)
        self._ready = None

    def reset(self, now: float) -> None:
        self.value, self._probe, self._ready = 0, None, None
        self._next_reset = now + self.RESET_S
