"""``handoff db rebalance``: on Citus, shards spread evenly over the workers, online.

After a worker joins (``handoff stack up --citus 3``, or ``citus_add_node`` on
a cluster of one's own) it holds no shards. A rebalance first places what
Handoff keeps on every node (the relay's wake-up flag: ``handoff db
upgrade`` does it, and an emit on a worker without it would fail), then
asks Citus for a background rebalance (``citus_rebalance_start``) and follows
its tasks to the end. Each task moves one shard group with logical
replication: emits, the relay and consumers go on, and writes to the moving
shards wait only for the final switch (``handoff chaos --kinds rebalance``
measures it under load).

Runs as the application role: Citus lets a table's owner rebalance it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from handoff.core import outbox_sql
from handoff.core.db import on_citus, translated
from handoff.core.errors import ConfigurationError, OperationRefused, RebalanceFailed
from handoff.core.settings import HandoffSettings
from handoff.operate import rebalance_sql as q

ENDED = {"finished", "failed", "cancelled"}


@dataclass
class Rebalanced:
    job: int | None  # None: nothing to move
    seconds: float = 0.0
    moves: int = 0  # tasks done
    before: dict[str, int] = field(default_factory=dict)  # shards per worker
    after: dict[str, int] = field(default_factory=dict)


def rebalance(
    settings: HandoffSettings,
    *,
    poll_s: float = 1.0,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Rebalanced:
    """Rebalance, and wait until every move is done."""
    with psycopg.connect(settings.database_url, autocommit=True) as conn, translated():
        if not on_citus(conn):
            raise ConfigurationError(
                "this database is one PostgreSQL server: there are no shards to rebalance "
                "(a rebalance is for Citus: docs/scaling.md)"
            )
        if missing := conn.execute(outbox_sql.WORKERS_WITHOUT_WAKEUP).fetchone()[0]:  # type: ignore[index]
            raise OperationRefused(
                f"{missing} worker(s) lack Handoff's per-node parts (the relay's wake-up "
                "flag), and an emit routed there would fail: run handoff db upgrade first"
            )
        refuse_unmovable(conn)
        began = time.monotonic()
        before = _shards(conn)
        job = conn.execute(q.START).fetchone()[0]  # type: ignore[index]
        done = Rebalanced(job, before=before, after=before)
        if job is None:
            return done
        while True:
            state, counts = conn.execute(q.STATUS, (job,)).fetchone()  # type: ignore[misc]
            done.moves = int(counts.get("done", 0))
            progress(done.moves, sum(int(n) for n in counts.values()))
            if state in ENDED:
                break
            time.sleep(poll_s)
        done.seconds, done.after = time.monotonic() - began, _shards(conn)
        if state != "finished":
            raise RebalanceFailed(
                f"the rebalance (Citus job {job}) ended {state} after {done.moves} move(s); "
                f"see SELECT * FROM citus_job_status({job}) for the tasks' messages"
            )
        return done


def refuse_unmovable(conn: psycopg.Connection[Any], group_of: str | None = None) -> None:
    """Refuses, before any shard moves, when a distributed table's shards could not move
    online (``group_of``: only that table's shard group). Citus would fail the move
    part-way, after the earlier ones were done; the message says what to add."""
    tables = [row[0] for row in conn.execute(q.UNMOVABLE, {"group_of": group_of})]
    if tables:
        raise OperationRefused(
            f"{', '.join(tables)} {'has' if len(tables) == 1 else 'have'} neither a primary key "
            "nor a replica identity, so Citus cannot move their shards online (logical "
            "replication); give each one, e.g. ALTER TABLE <table> REPLICA IDENTITY FULL, "
            "then run again"
        )


def _shards(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return {node: n for node, n in conn.execute(q.SHARDS_PER_WORKER).fetchall()}
