"""How far the relay's slots are published: the bound it proves, and the rows above it.

The outbox is append-only: rows are never marked. Each slot keeps a bound
(``handoff.relay_cursors``) below which every row is settled, that is
published or parked, and the relay moves it up as batches settle.

The hard part is a late commit: an emit takes its outbox id when it inserts
and commits a moment later, so a row may become visible after rows with
higher ids were fetched and published. A bound moved past such a row would
skip it for good. So the bound moves only past ids proven visible:

- Each fetch comes with its snapshot's xmin, the next transaction id to be
  assigned and the last id handed out, both read after that snapshot was
  taken (``FETCH_PENDING``; not the snapshot's xmax, which a running
  transaction's xid may exceed: a test with three relays lost rows so).
- A probe takes the last id V of one fetch and the next xid X of the next
  one, read after V was. Every writer that holds an id up to V had its
  transaction id before it took the id (the outbox id's default takes the
  xid first, since migration 0031_outbox_xid_first; an emit's first write is
  the document's state row anyway), so its transaction id is below X.
- A later fetch whose xmin is at least X sees every such emit ended: all ids
  up to V are visible to it or gone. That fetch returns the lowest pending
  rows it sees, so afterwards every id up to V has been fetched, or lies
  above that fetch's last row when it was full. That is a proof.

A transaction that runs long (a report, a migration, anything with an xid)
would hold that proof back, and with it the bound, while the fetched rows
above the bound pile up. So a probe that waited STALL_S also asks who holds
the outbox's insert lock (``lockers``): an emit takes it before it takes
its id and keeps it to its end. Once none of the holders seen after V was
read holds it any more, every emit with an id up to V has ended, and the
next fetch is the proof. Only an emit that stays open itself holds the
bound, and then rightly.

The bound is the lowest of the proofs so far, the lowest id in flight and the
lowest id fetched but not delivered (a failure; it is fetched again), minus
one. Until the bound passes them, fetched rows are left out of the next
fetches by id (``seen``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from handoff.core.outbox_sql import IdArray
from handoff.relay.slots import SLOTS

# Bounds of the slots a relay does not own: no id is above it.
NOT_OWNED = 2**63 - 1
STALL_S = 0.5  # a probe waiting this long also asks who holds the outbox's insert lock


@dataclass
class Probe:
    """One attempt at a proof: the last id V, and what must end before it holds."""

    last_id: int
    next_xid: int | None = None  # read after V: every holder of an id <= V is below it
    since: float = 0.0
    lockers: set[str] | None = None  # holders of the insert lock, read after V
    ended: bool = False  # none of them holds it any more: the next fetch proves V


@dataclass
class Fetched:
    """The ids of one fetched batch, joined once for the fetch's exclusion array."""

    first: int
    last: int
    ids: str


class Cursor:
    """The proven bound of the owned slots and the fetched rows above it."""

    def __init__(self, stored: dict[int, int], clock: Callable[[], float] = time.monotonic) -> None:
        """``stored``: each owned slot's bound, as its previous owner left it."""
        self._clock = clock
        self.slots = sorted(stored)
        self.value = min(stored.values()) if stored else 0
        self.saved = self.value
        self._stored = stored
        self._proven = self.value
        self._probe: Probe | None = None
        self._seen: list[Fetched] = []  # in flight or settled, above the bound
        self._in_flight: set[int] = set()  # the first id of each batch in flight
        self._undelivered: set[int] = set()  # fetched, not delivered: to fetch again
        self._bounds: IdArray | None = None

    # -- what a fetch sends ------------------------------------------------------------

    def bounds(self) -> IdArray:
        """Each slot's bound (slot + 1 indexes it)."""
        if self._bounds is None:
            values = [NOT_OWNED] * SLOTS
            for slot, stored in self._stored.items():
                values[slot] = max(stored, self.value)
            self._bounds = IdArray.of(values)
        return self._bounds

    def seen(self) -> IdArray:
        return IdArray.joined([f.ids for f in self._seen if f.ids])

    @property
    def seen_count(self) -> int:
        """About how many ids the fetches leave out (a long-open emit makes it grow)."""
        return sum(f.last - f.first + 1 for f in self._seen) if self._seen else 0

    @property
    def wants_lockers(self) -> bool:
        """The probe has waited STALL_S for the transactions below its xid: ask the locks."""
        probe = self._probe
        return bool(probe and probe.next_xid is not None and self._clock() - probe.since >= STALL_S)

    @property
    def unconfirmed(self) -> bool:
        """Rows were fetched above the bound: the relay keeps fetching until it passes them."""
        return bool(self._seen) or bool(self._undelivered)

    # -- what a fetch says --------------------------------------------------------------

    def fetched(
        self,
        xmin: int,
        next_xid: int,
        last_id: int,
        ids: list[int],
        *,
        full: bool,
        lockers: list[str] | None = None,
    ) -> Fetched | None:
        """Takes one fetch's snapshot and rows (in id order); the batch, if any rows.

        ``lockers``: the insert lock's holders, read during this fetch (when asked).
        """
        proof: int | None = None
        probe = self._probe
        if probe is None:
            self._probe = Probe(last_id)
        elif probe.next_xid is None:
            probe.next_xid, probe.since = next_xid, self._clock()
        elif xmin >= probe.next_xid or probe.ended:
            proof = probe.last_id
            self._probe = Probe(last_id)
        elif lockers is not None:
            # Read after this fetch's snapshot: ended holders prove the next fetch.
            if probe.lockers is None:
                probe.lockers = set(lockers)
            probe.ended = not probe.lockers.intersection(lockers)
        batch = None
        if ids:
            self._undelivered.difference_update(ids)
            batch = Fetched(ids[0], ids[-1], ",".join(map(str, ids)))
            self._seen.append(batch)
            self._in_flight.add(batch.first)
        if proof is not None:
            if full and ids:
                proof = min(proof, ids[-1])
            self._proven = max(self._proven, proof)
        self._advance()
        return batch

    def settled(self, batch: Fetched, undelivered: list[int]) -> None:
        """A batch's rows are delivered or parked, but for ``undelivered`` (fetched again)."""
        self._in_flight.discard(batch.first)
        if undelivered:
            self._undelivered.update(undelivered)
            again = set(undelivered)
            batch.ids = ",".join([i for i in batch.ids.split(",") if int(i) not in again])
        self._advance()

    def _advance(self) -> None:
        bound = self._proven
        if self._in_flight:
            bound = min(bound, min(self._in_flight) - 1)
        if self._undelivered:
            bound = min(bound, min(self._undelivered) - 1)
        if bound > self.value:
            self.value = bound
            self._bounds = None
            self._seen = [f for f in self._seen if f.last > bound]
