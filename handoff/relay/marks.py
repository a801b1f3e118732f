"""On Citus: what the relay has in flight, where each published row is marked.

One server's relay proves a bound per slot (cursor.py). On Citus the outbox
is spread over workers whose ids and transaction ids have nothing in common,
and a shard move carries rows from one to another, so the relay marks each
row it published instead (outbox_sql.CITUS_FETCH says how it keeps each
document's order). There is nothing to prove: a row is pending until it is
marked. What is left to track is the rows fetched and not yet settled, which
the fetches that overlap them leave out.

``Marks`` answers the parts of ``Cursor`` the relay's loop asks of both, so
the loop stays one; the fields with no meaning here stay at rest.
"""

from __future__ import annotations

from handoff.core.outbox_sql import IdArray
from handoff.relay.cursor import Fetched


class Marks:
    """The owned slots and the fetched batches not yet settled."""

    value = 0  # no bound: nothing to save
    saved = 0
    wants_lockers = False
    unconfirmed = False  # no proof to wait for: idle means idle

    def __init__(self, slots: set[int]) -> None:
        self.slots = sorted(slots)
        self._slots = IdArray.of(self.slots)
        self._in_flight: list[Fetched] = []

    def owned(self) -> IdArray:
        return self._slots

    def seen(self) -> IdArray:
        return IdArray.joined([f.ids for f in self._in_flight if f.ids])

    @property
    def seen_count(self) -> int:
        return sum(f.ids.count(",") + 1 for f in self._in_flight if f.ids)

    def fetched(self, ids: list[int]) -> Fetched | None:
        if not ids:
            return None
        batch = Fetched(ids[0], ids[-1], ",".join(map(str, ids)))
        self._in_flight.append(batch)
        return batch

    def settled(self, batch: Fetched, undelivered: list[int]) -> None:
        """Marked (or parked) but ``undelivered``: those stay unmarked and are fetched again."""
        self._in_flight = [f for f in self._in_flight if f is not batch]
