"""Dividing the outbox among relays: slots owned through advisory locks.

Every outbox row has a slot, a stable hash of its document (0..255, see the
outbox table). A relay publishes only rows of slots whose session-level
advisory lock it holds, so at any moment one document's events are
published by one relay, and in id (= version) order. The locks live on the
relay's own database session: if the relay dies, its session ends, the locks
vanish, and the surviving relays take the slots over at their next
rebalance. Slots change hands only between batches.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg

from handoff.core import outbox_sql as q

SLOTS = 256  # must match the "& 255" of outbox.slot


class SlotOwner:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.owned: set[int] = set()
        conn.execute(q.JOIN, {"cls": q.RELAY_MEMBER_CLASS})

    def fair_share(self) -> int:
        row = self.conn.execute(q.RELAYS_ALIVE, {"cls": q.RELAY_MEMBER_CLASS}).fetchone()
        relays = max(1, int(row[0]) if row else 1)
        return math.ceil(SLOTS / relays)

    def rebalance(self, *, take_all: bool = False) -> None:
        """Release slots beyond a fair share; take free ones up to it."""
        share = SLOTS if take_all else self.fair_share()
        while len(self.owned) > share:
            slot = max(self.owned)
            self.conn.execute(q.UNLOCK_SLOT, {"cls": q.RELAY_LOCK_CLASS, "slot": slot})
            self.owned.discard(slot)
        if len(self.owned) >= share:
            return
        held = {
            r[0] for r in self.conn.execute(q.SLOTS_HELD_BY_OTHERS, {"cls": q.RELAY_LOCK_CLASS})
        }
        for slot in range(SLOTS):
            if len(self.owned) >= share:
                break
            if slot in self.owned or slot in held:
                continue
            row = self.conn.execute(q.TRY_LOCK_SLOT, {"cls": q.RELAY_LOCK_CLASS, "slot": slot})
            got = row.fetchone()
            if got and got[0]:
                self.owned.add(slot)
