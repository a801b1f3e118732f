"""Idle relays with a long poll: what publishes a new row is an emit's NOTIFY, and
what makes it count as published (``outbox_pending``: above its slot's saved bound)
is the relay saving its bound before it waits.

Each relay here polls once a minute, so rows settled within the test's waits were
settled without a poll running out.
"""

from __future__ import annotations

from typing import Any

import psycopg

from handoff.core.outbox_sql import RELAY_LOCK_CLASS
from handoff.stack.procs import wait_until
from tests.fix_relay import Relays, Workload, pending, slot_holders

MINUTE_POLL = {"poll_interval_s": "60"}
SETTLED_S = 20  # well inside the minute


def test_idle_relays_with_a_minute_poll_settle_each_emit_at_once(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str
) -> None:  # fmt: skip
    """Three relays, rounds of emits between idle spells. Each round's rows are
    published (woken by the emits) and their bounds saved before the relays wait
    again: a relay whose last look proved its bound used to save it only after its
    wait. And slots a relay gave up in a rebalance are taken at the next rebalance,
    not after the others' poll. Before both, this test failed 6 runs in 6."""
    for _ in range(3):
        relays.start(**MINUTE_POLL)
    warm = iter(range(10**6))

    def shared() -> bool:
        workload.run(docs=6, steps=2, threads=2, prefix=f"warm{next(warm)}")
        wait_until(lambda: pending(admin, tenant) == 0, 2, 0.1)
        return slot_holders(admin) == 3 and pending(admin, tenant) == 0

    assert wait_until(shared, 60, 0.2), "three relays never shared slots and settled"
    for round_ in range(15):
        workload.run(docs=12, steps=2, threads=2, prefix=f"r{round_}")  # rows in every slot range
        assert wait_until(lambda: pending(admin, tenant) == 0, SETTLED_S, 0.1), (
            f"round {round_}: {_stuck(admin, tenant)}"
        )


def _stuck(admin: psycopg.Connection[Any], tenant: str) -> str:
    """The pending rows with their slot's saved bound and owner, for the failure."""
    rows = admin.execute(
        "SELECT p.id, p.slot, c.published_upto,"
        "       (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        "           AND classid = %s AND objid = p.slot) AS owner"
        "  FROM handoff.outbox_pending p JOIN handoff.relay_cursors c USING (slot)"
        " WHERE p.tenant_id = %s ORDER BY p.id",
        (RELAY_LOCK_CLASS, tenant),
    ).fetchall()
    return f"{len(rows)} rows waited for a relay's poll (id, slot, bound, owner): {rows}"
