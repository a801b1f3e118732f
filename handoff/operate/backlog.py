"""``handoff backlog``: the recovery budget of the relay and each consumer.

For each, over a measuring window: arrival rate, completion rate, backlog,
oldest pending age and the idealised drain time, backlog / (completion -
arrival), as the playbook computes it (section 10: 7,200 waiting, 80/s in,
100/s done -> 360 s). When completion does not exceed arrival there is no
finite drain time, and that is what is printed.

What counts as completed: for the relay, rows published (arrivals minus the
growth of the waiting rows); for a consumer, offsets committed, which the
runtime does only after the database commit of their work (completed, not
pulled), and, beside it, its guard rows: the business events it applied.

On one server, arrivals are the outbox rows with an id above the first
snapshot's highest. On Citus each node draws outbox ids of its own, so they
are not one sequence to count by (docs/scaling.md): arrivals are the rows
created in the window instead (``created_at``, the emit's transaction start;
an emit that began before the window and committed inside it is missed, an
error of the order of one emit's duration).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from handoff.core import kafka as lag
from handoff.core.db import on_citus, translated
from handoff.core.settings import HandoffSettings
from handoff.operate import backlog_sql as q


def drain_time(backlog: int, arrival: float, completion: float) -> float | None:
    """Seconds to drain ``backlog`` while work keeps arriving; None if it never drains."""
    if backlog <= 0:
        return 0.0
    spare = completion - arrival
    return backlog / spare if spare > 0 else None


@dataclass(frozen=True)
class Budget:
    name: str
    backlog: int
    arrival_per_s: float
    completion_per_s: float
    work_per_s: float | None  # business events applied (consumers), per second
    oldest_age_s: float | None

    @property
    def drain_s(self) -> float | None:
        return drain_time(self.backlog, self.arrival_per_s, self.completion_per_s)


@dataclass
class _Snapshot:
    at: datetime
    clock: float
    relay: dict[str, Any]
    groups: dict[str, list[lag.PartitionPosition]]


def _snapshot(
    conn: psycopg.Connection[Any], bootstrap: str, groups: list[str], citus: bool
) -> _Snapshot:
    with translated():
        at = conn.execute(q.NOW).fetchone()[0]  # type: ignore[index]
        # Two statements: Citus refuses a subquery beside an aggregate.
        row = conn.execute(q.RELAY).fetchone()
        high = None if citus else conn.execute(q.HIGH).fetchone()[0]  # type: ignore[index]
    positions = lag.group_positions_isolated(bootstrap, groups)
    assert row is not None
    waiting = {"pending": row[0], "oldest": row[1], "high": high}
    return _Snapshot(at, time.monotonic(), waiting, positions)


def measure(
    settings: HandoffSettings,
    *,
    tenant: str | None = None,
    window_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Budget]:
    """Two snapshots ``window_s`` apart; the relay first, then each consumer group."""
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        with translated():
            services = conn.execute(q.SERVICES, {"tenant": tenant}).fetchall()
            citus = on_citus(conn)
        names = {lag.group_of(t, s): (t, s) for t, s in services}
        progress(f"measuring for {window_s:g} s: the relay and {len(names)} consumer group(s)")
        first = _snapshot(conn, settings.kafka_bootstrap, list(names), citus)
        sleep(window_s)
        last = _snapshot(conn, settings.kafka_bootstrap, list(names), citus)
        with translated():
            arrivals = (
                (q.CREATED_BETWEEN, {"since": first.at, "until": last.at})
                if citus
                else (q.ARRIVED, {"high": first.relay["high"]})
            )
            arrived = conn.execute(*arrivals).fetchone()[0]  # type: ignore[index]
            work = {(t, c): n for t, c, n in conn.execute(
                q.WORK_SINCE, {"since": first.at, "tenant": tenant})}  # fmt: skip
    seconds = max(last.clock - first.clock, 1e-3)
    published = arrived - (last.relay["pending"] - first.relay["pending"])
    oldest = last.relay["oldest"]
    budgets = [
        Budget(
            "relay",
            int(last.relay["pending"]),
            arrived / seconds,
            max(published, 0) / seconds,
            None,
            (last.at - oldest).total_seconds() if oldest else None,
        )
    ]
    for group, parts in sorted(last.groups.items()):
        if not parts:
            continue  # never committed anything: not running, or not yet
        before = {(p.topic, p.partition): p for p in first.groups.get(group, [])}
        arrival = completion = 0
        for p in parts:
            was = before.get((p.topic, p.partition))
            arrival += p.end - (was.end if was else p.end)
            completion += p.committed - (was.committed if was else p.committed)
        t, consumer = names[group]
        budgets.append(
            Budget(
                f"{consumer} ({t})",
                sum(p.lag for p in parts),
                arrival / seconds,
                completion / seconds,
                work.get((t, consumer), 0) / seconds,
                lag.oldest_pending_age(settings.kafka_bootstrap, parts),
            )
        )
    return budgets


def brokers_line(bootstrap: str, timeout_s: float = 5.0) -> str:
    """One line on the brokers: how many answer, which are missing, what is under-replicated."""
    try:
        return lag.cluster_health(bootstrap, timeout_s).summary()
    except lag.KafkaException as exc:
        return f"Kafka: brokers unknown ({exc})"
