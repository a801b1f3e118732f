"""Tracker reads at 10k, 100k and 1M active documents over 50 skewed owners.

Each size is a fresh tenant, bulk-loaded with one INSERT … SELECT into the
state table (the deadline trigger keeps its counters as for any writer),
the owner counters set to the loaded totals, then the passed deadline hours
folded as the running tracker does every minute. Timed: the read model's
calls, exactly as the HTTP handlers make them (credential check, reader
role, one pipelined transaction), and, in the same run, the
``COUNT(*) … GROUP BY owner`` that answers the counts by scanning.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from benchmarks.stats import percentile
from benchmarks.tenants import remove_tenant
from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port
from handoff.stack.procs import wait_until
from handoff.tracker import operate
from handoff.tracker import read_model as reads
from handoff.tracker.lag_sql import cluster_of
from handoff.tracker.read_model import ReadModel
from handoff.tracker.settings import TrackerSettings

OWNERS = 50

# Owner k of 50 with P(k) falling steeply (owner-00 ~21%, owner-49 ~0.5%);
# assigned over the last 30 days; 80% with a deadline up to 45 days after
# assignment, so about a third are overdue.
LOAD = """
INSERT INTO handoff.document_state (tenant_id, document_id, run_id, owner, status, version,
                                    assigned_at, due_at, created_at, updated_at, data)
SELECT %(tenant)s, 'doc-' || g, 1,
       'owner-' || lpad(floor(%(owners)s * power(random(), 2.5))::int::text, 2, '0'),
       'waiting', 1 + g %% 5, at,
       CASE WHEN random() < 0.8 THEN at + random() * interval '45 days' END,
       at, at, jsonb_build_object('amount', g %% 997)
  FROM (SELECT g, now() - random() * interval '30 days' AS at
          FROM generate_series(%(first)s::int, %(last)s::int) AS g) AS s
"""

# Finished work beside the active documents: half as many, completed over the
# last 30 days (owner NULL, so no waiting-work index or counter holds them).
LOAD_DONE = """
INSERT INTO handoff.document_state (tenant_id, document_id, run_id, owner, status, version,
                                    assigned_at, due_at, created_at, updated_at, completed_at,
                                    data)
SELECT %(tenant)s, 'done-' || g, 1, NULL, 'paid', 4, NULL, NULL, at - interval '2 days', at, at,
       jsonb_build_object('amount', g %% 997)
  FROM (SELECT g, now() - random() * interval '30 days' AS at
          FROM generate_series(%(first)s::int, %(last)s::int) AS g) AS s
"""

COUNTS = """
INSERT INTO handoff.owner_counts (tenant_id, owner, shard, assigned)
SELECT tenant_id, owner, 0, count(*) FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND owner IS NOT NULL GROUP BY tenant_id, owner
"""

# A day of flow for the pipeline and the charts: a chain of the 50 owners
# (created -> owner-00 -> ... -> owner-49 -> completed), every minute; then
# the edges summed, and a day of minute samples copied from one real sample.
LOAD_FLOW = """
INSERT INTO handoff.flow_minutes (tenant_id, minute, from_owner, to_owner, n)
SELECT %(tenant)s, date_bin('1 minute', now() - m * interval '1 minute',
                            timestamptz '2000-01-01 00:00:00+00'),
       CASE WHEN k = 0 THEN '' ELSE 'owner-' || lpad((k - 1)::text, 2, '0') END,
       CASE WHEN k = %(owners)s THEN '' ELSE 'owner-' || lpad(k::text, 2, '0') END,
       1 + (random() * 20)::int
  FROM generate_series(0, 1439) AS m, generate_series(0, %(owners)s) AS k
"""
LOAD_EDGES = """
INSERT INTO handoff.flow_edges (tenant_id, from_owner, to_owner, n, last_at)
SELECT tenant_id, from_owner, to_owner, sum(n), max(minute) FROM handoff.flow_minutes
 WHERE tenant_id = %(tenant)s GROUP BY 1, 2, 3
"""
SAMPLE = "SELECT handoff.sample_owners(interval '0 seconds')"
LOAD_SAMPLES = """
INSERT INTO handoff.owner_samples (tenant_id, sampled_at, owner, assigned, overdue,
                                   oldest_assigned_at, age_p50_from, age_p90_from, coarse)
SELECT tenant_id, sampled_at - m * interval '1 minute', owner, assigned, overdue,
       oldest_assigned_at, age_p50_from, age_p90_from, m %% 10 = 0
  FROM handoff.owner_samples, generate_series(1, 1439) AS m
 WHERE tenant_id = %(tenant)s
"""

FOLD = "SELECT handoff.fold_due_counts()"
ANALYZE = """ANALYZE handoff.document_state, handoff.owner_counts, handoff.owner_due_counts,
                   handoff.flow_minutes, handoff.flow_edges, handoff.owner_samples"""

# The baseline: the same per-owner answer computed by scanning the documents.
GROUP_BY = """
SELECT owner, count(*), count(*) FILTER (WHERE due_at < now()), min(assigned_at)
  FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND owner IS NOT NULL
 GROUP BY owner
"""


@dataclass(frozen=True)
class Timing:
    p50_ms: float
    p99_ms: float
    runs: int


@dataclass(frozen=True)
class SizeResult:
    documents: int
    load_s: float
    owner_page: Timing
    overdue_page: Timing
    detail: Timing
    counts: Timing
    completed: Timing
    completed_prefix: Timing
    group_by: Timing
    flow: dict[str, Timing] = field(default_factory=dict)
    sample_s: float = 0.0  # one sample_owners() round, every tenant (the tracker's minute job)
    http: dict[str, Timing] = field(default_factory=dict)


def _timing(samples: list[float]) -> Timing:
    ordered = sorted(samples)
    return Timing(percentile(ordered, 50) * 1000, percentile(ordered, 99) * 1000, len(ordered))


def _bulk(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> None:
    """One bulk INSERT, again when it deadlocks with the running tracker's minute fold
    of the deadline counters (both write owner_due_counts; the statement rolled back)."""
    for attempt in range(1, 6):
        try:
            conn.execute(statement, params)
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == 5:
                raise
            time.sleep(0.5 * attempt)


def load(
    settings: HandoffSettings, tenant: str, documents: int, progress: Any
) -> tuple[Credential, float]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        viewer = add_service(conn, "viewer", tenant=tenant)
        step = 100_000
        for first in range(1, documents + 1, step):
            last = min(documents, first + step - 1)
            _bulk(conn, LOAD, {"tenant": tenant, "first": first, "last": last, "owners": OWNERS})
            progress(last)
        for first in range(1, documents // 2 + 1, step):
            last = min(documents // 2, first + step - 1)
            _bulk(conn, LOAD_DONE, {"tenant": tenant, "first": first, "last": last})
        conn.execute(COUNTS, {"tenant": tenant})
        conn.execute(FOLD)
        conn.execute(LOAD_FLOW, {"tenant": tenant, "owners": OWNERS})
        conn.execute(LOAD_EDGES, {"tenant": tenant})
        conn.execute(ANALYZE)
        started = time.perf_counter()
        conn.execute(SAMPLE)
        sample_s = time.perf_counter() - started
        conn.execute(LOAD_SAMPLES, {"tenant": tenant})
        conn.execute(ANALYZE)
    return viewer, sample_s


def clean(settings: HandoffSettings, tenant: str) -> None:
    remove_tenant(settings.database_url, tenant, ["viewer"])


async def _time(call: Callable[[], Awaitable[Any]], runs: int) -> Timing:
    for _ in range(min(20, runs)):  # warm the pool, the plans and the cache
        await call()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return _timing(samples)


class Picks:
    """Random owners (with the load's skew) and documents to read."""

    NAMES = tuple(f"owner-{k:02d}" for k in range(OWNERS))
    # P(owner k) of LOAD's floor(OWNERS * random()^2.5)
    WEIGHTS = tuple((k + 1) ** 2.5 - k**2.5 for k in range(OWNERS))

    def __init__(self, documents: int, seed: int) -> None:
        self.documents = documents
        self.rng = random.Random(seed)

    def owner(self) -> str:
        return self.rng.choices(self.NAMES, self.WEIGHTS)[0]

    def document(self) -> str:
        return f"doc-{self.rng.randint(1, self.documents)}"

    def prefix(self) -> str:
        """The start of an active document's id: 'doc-' and its first three digits."""
        return f"doc-{self.rng.randint(1, self.documents)}"[:7]

    def amount(self) -> int:
        return self.rng.randint(0, 996)

    def done_prefix(self) -> str:
        """The start of a finished document's id: 'done-' and its first three digits."""
        return f"done-{self.rng.randint(1, max(self.documents // 2, 1))}"[:8]


async def _measure(
    settings: HandoffSettings, tenant: str, viewer: Credential, documents: int, runs: int
) -> dict[str, Any]:
    pick = Picks(documents, seed=documents)
    async with AsyncConnectionPool(
        settings.database_url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    ) as pool:
        model = ReadModel(pool)
        result = {
            "owner_page": await _time(
                lambda: model.one(viewer, reads.owner_documents(pick.owner(), 50)), runs
            ),
            "overdue_page": await _time(
                lambda: model.one(viewer, reads.owner_overdue(pick.owner(), 50)), runs
            ),
            "detail": await _time(lambda: model.one(viewer, reads.document(pick.document())), runs),
            "counts": await _time(lambda: model.one(viewer, reads.owners()), runs),
            "completed": await _time(lambda: model.one(viewer, reads.completed(50)), runs),
            "completed_prefix": await _time(
                lambda: model.one(viewer, reads.completed(50, None, pick.done_prefix())), runs
            ),
        }
        scans = max(10, min(runs, 2_000_000 // documents))

        async def group_by() -> None:
            async with pool.connection() as conn:
                await (await conn.execute(GROUP_BY, {"tenant": tenant})).fetchall()

        result["group_by"] = await _time(group_by, scans)
        flow = {
            "pipeline": await _time(lambda: model.pipeline(viewer), runs),
            "trends_hour": await _time(lambda: model.trends(viewer, "hour"), runs),
            "trends_day": await _time(lambda: model.trends(viewer, "day"), runs),
            "find_prefix": await _time(
                lambda: model.one(viewer, reads.find(reads.FindFilter(id_prefix=pick.prefix()))),
                runs,
            ),
            "find_overdue": await _time(
                lambda: model.one(
                    viewer,
                    reads.find(reads.FindFilter(owner=pick.owner(), sort="due", overdue=True)),
                ),
                runs,
            ),
            # The worst case: 1 in 997 matches, so every request walks the whole bound.
            "find_data": await _time(
                lambda: model.one(
                    viewer, reads.find(reads.FindFilter(contains={"amount": pick.amount()}))
                ),
                runs,
            ),
            "operate": await _time(
                lambda: operate.operate_view(
                    model, viewer, TrackerSettings(), cluster_of(settings.kafka_bootstrap)
                ),
                runs,
            ),
        }
    return {**result, "flow": flow}


@contextmanager
def served(home: Path, **env: str) -> Iterator[str]:
    """A real ``handoff serve`` process for the HTTP timings (``env``: more settings)."""
    port = pick_port(18700, set())
    proc = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "serve", "--port", str(port)],
        env={**os.environ, "HANDOFF_HOME": str(home), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        if not wait_until(healthy, 30) or proc.poll() is not None:
            raise RuntimeError("handoff serve did not start for the benchmark")
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


def _http(url: str, viewer: Credential, documents: int, runs: int) -> dict[str, Timing]:
    """The same reads through HTTP on loopback, timed by the client (server time + transport)."""
    pick = Picks(documents, seed=documents + 1)
    paths: dict[str, Callable[[], str]] = {
        "owner_page": lambda: f"/v1/owners/{pick.owner()}/documents",
        "overdue_page": lambda: f"/v1/owners/{pick.owner()}/overdue",
        "detail": lambda: f"/v1/documents/{pick.document()}",
        "counts": lambda: "/v1/owners",
        "completed": lambda: "/v1/completed",
        "completed_prefix": lambda: f"/v1/completed?idPrefix={pick.done_prefix()}",
    }
    result = {}
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {viewer.token}"}, timeout=10
    ) as client:
        for name, path in paths.items():
            samples = []
            for i in range(runs + 20):
                started = time.perf_counter()
                client.get(path()).raise_for_status()
                if i >= 20:  # warm-up
                    samples.append(time.perf_counter() - started)
            result[name] = _timing(samples)
    return result


def run(
    settings: HandoffSettings,
    home: Path,
    sizes: list[int],
    runs: int,
    say: Callable[[str], None],
) -> list[SizeResult]:
    results = []
    with served(home) as url:
        for documents in sizes:
            tenant = f"trk-{documents}-{uuid.uuid4().hex[:6]}"
            say(f"  {documents:,} documents: loading…")
            started = time.perf_counter()
            try:
                viewer, sample_s = load(settings, tenant, documents, lambda n: None)
                load_s = time.perf_counter() - started
                say(f"    loaded in {load_s:.1f} s; timing {runs} reads of each kind…")
                timed = asyncio.run(_measure(settings, tenant, viewer, documents, runs))
                http = _http(url, viewer, documents, runs)
            finally:
                clean(settings, tenant)
            results.append(SizeResult(documents, load_s, **timed, sample_s=sample_s, http=http))
    return results
