"""The consumer-lag sampler: a child process of ``handoff serve`` (DESIGN.md "Tracker").

Every ``HANDOFF_TRACKER_LAG_INTERVAL_S`` it looks up the committed position
and the partition ends of each registered service's consumer group in
Kafka and writes the lag into ``handoff.consumer_lag``; the operate page
reads that table. Why a process of its own: librdkafka's admin lookups are
native code, and one of them (the offsets of a group whose coordinator is
not ready) ends its process with SIGSEGV. Here that ends only the sampler;
the server restarts it (``supervise``), and the page says since when lag is
unavailable instead of the server dying for every tenant.

Several trackers: each starts a sampler, and the one holding an advisory
lock samples. The sampler ends when its parent does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from handoff.core import db
from handoff.core import kafka as lag
from handoff.core.errors import DatabaseUnavailable
from handoff.core.isolated import describe_exit
from handoff.core.outage import Outage
from handoff.core.retry import RetryPolicy
from handoff.core.settings import HandoffSettings, load_settings
from handoff.telemetry import logs
from handoff.tracker import lag_sql as q
from handoff.tracker.settings import TrackerSettings

log = logging.getLogger("handoff.tracker.lag")


def sample(conn: psycopg.Connection[Any], bootstrap: str, timeout_s: float, keep_s: float) -> int:
    """One sample of the brokers and of every group's lag; the groups that have a
    position. Rows of groups not seen for ``keep_s`` are deleted."""
    cluster = q.cluster_of(bootstrap)
    health = lag.cluster_health(bootstrap, timeout_s)
    services = conn.execute(q.SERVICES).fetchall()
    names = {lag.group_of(tenant, name): (tenant, name) for tenant, name in services}
    found = lag.group_positions(bootstrap, names, timeout_s)
    rows = [
        {"cluster": cluster, "tenant_id": names[group][0], "consumer": names[group][1],
         "group_id": group,
         "lag": sum(p.lag for p in parts), "partitions": len(parts)}
        for group, parts in found.items() if parts
    ]  # fmt: skip
    with conn.transaction():  # readers see the last sample or this one, whole
        with conn.cursor() as cur:
            cur.executemany(q.UPSERT, rows)
        conn.execute(q.FORGET_STALE, {"cluster": cluster, "keep_s": keep_s})
        conn.execute(
            q.SAMPLED,
            {"cluster": cluster, "up": len(health.up), "missing": list(health.missing),
             "under_replicated": health.under_replicated, "offline": health.offline},
        )  # fmt: skip
    return len(rows)


def run(settings: HandoffSettings, tracker: TrackerSettings, stopping: threading.Event) -> None:
    """Sample until stopped (or the parent is gone), through database and Kafka outages."""
    parent = os.getppid()

    def going_on() -> bool:
        return not stopping.is_set() and os.getppid() == parent

    kafka, database = Outage(log, "Kafka (consumer lag)"), Outage(log, "the database")
    retry = RetryPolicy(base_s=0.5, max_s=30.0)
    failures = 0
    while going_on():
        try:
            conn = db.connect(settings.database_url, autocommit=True, connect_timeout=10)
        except DatabaseUnavailable as exc:
            failures += 1
            database.failed(exc)
            stopping.wait(retry.delay(failures))
            continue
        database.ok()
        failures = 0
        try:
            with conn, db.translated(sent=False):
                _sample_while(going_on, conn, settings, tracker, kafka, stopping)
        except DatabaseUnavailable as exc:
            database.failed(exc)


def _sample_while(
    going_on: Callable[[], bool],
    conn: psycopg.Connection[Any],
    settings: HandoffSettings,
    tracker: TrackerSettings,
    kafka: Outage,
    stopping: threading.Event,
) -> None:
    held = False
    cluster = {"cluster": q.cluster_of(settings.kafka_bootstrap)}
    while going_on():
        held = held or bool(conn.execute(q.TRY_LOCK, cluster).fetchone()[0])  # type: ignore[index]
        if held:  # else another tracker's sampler samples; try again next round
            try:
                keep_s = 3 * tracker.lag_interval_s + tracker.lag_timeout_s
                sample(conn, settings.kafka_bootstrap, tracker.lag_timeout_s, keep_s)
                kafka.ok()
            except (lag.KafkaException, TimeoutError) as exc:
                kafka.failed(exc)
                conn.execute(q.FAILING, {**cluster, "error": f"Kafka: {exc}"})
        stopping.wait(tracker.lag_interval_s)


def main() -> None:
    logs.configure(logging.WARNING)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    run(load_settings(), TrackerSettings(), stopping)


# -- in the server: start the sampler, and start it again when it ends -----------------


def _environment(settings: HandoffSettings) -> dict[str, str]:
    # The server's settings may be given in code (tests, the demo): the child gets them
    # explicitly, whatever its environment says.
    return {
        **os.environ,
        "HANDOFF_DATABASE_URL": settings.database_url,
        "HANDOFF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
    }


async def supervise(
    settings: HandoffSettings,
    tracker: TrackerSettings,
    record_failure: Callable[[str], Awaitable[None]],
) -> None:
    """Keep a sampler child running until cancelled; a child's end is logged, recorded
    with ``record_failure(text)`` (so the page shows lag as unavailable) and followed by
    a new child after a backoff."""
    retry = RetryPolicy(base_s=1.0, max_s=60.0)
    loop = asyncio.get_running_loop()
    ended = 0
    while True:
        started = loop.time()
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "handoff.tracker.lag_sampler",
            env=_environment(settings), stdin=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            code = await child.wait()
        except asyncio.CancelledError:
            if child.returncode is None:
                child.terminate()
                try:
                    await asyncio.wait_for(child.wait(), 5)
                except TimeoutError:
                    child.kill()
                    await child.wait()
            raise
        # A child that ran for a while starts its count again: a crash a day is no loop.
        ended = 1 if loop.time() - started > 300 else ended + 1
        delay = 1.0 + retry.delay(ended)
        why = f"the consumer-lag sampler {describe_exit(code)}"
        log.warning("%s; starting it again in %.1f s", why, delay)
        try:
            await record_failure(why)
        except Exception as exc:  # the database may be away too: the next child records
            log.debug("could not record the sampler's end: %s", exc)
        await asyncio.sleep(delay)


if __name__ == "__main__":
    main()
