"""The auditor at growing sizes: wall time and the peak memory of ``handoff audit``.

Each size is a fresh tenant bulk-loaded (state, one history version each,
owner counters; the deadline trigger keeps its counters as for any writer),
audited as a real process whose resident memory is sampled every 20 ms,
then deleted. The history is older than the outbox window, so the outbox
check walks it and finds nothing to require. A healthy load must audit
clean: the benchmark fails if any breach is reported.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.stats import peak_rss
from benchmarks.tenants import remove_tenant
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings

OWNERS = 20
STEP = 200_000

LOAD_STATE = """
INSERT INTO handoff.document_state (tenant_id, document_id, run_id, owner, status, version,
                                    assigned_at, due_at, created_at, updated_at, data)
SELECT %(tenant)s, 'doc-' || g, 1, 'owner-' || (g %% %(owners)s), 'waiting', 1, at,
       CASE WHEN g %% 3 = 0 THEN at + interval '3 days' END, at, at,
       jsonb_build_object('amount', g %% 997)
  FROM (SELECT g, now() - interval '2 days' - (g %% 1000) * interval '1 minute' AS at
          FROM generate_series(%(first)s::int, %(last)s::int) AS g) AS s
"""
LOAD_HISTORY = """
INSERT INTO handoff.document_history (tenant_id, document_id, run_id, version, event_id,
                                      event_type, sender, owner_before, owner_after, status,
                                      accepted_at, assigned_at, due_at, data)
SELECT tenant_id, document_id, 1, 1, document_id || '-c', 'created', 'maker', NULL, owner,
       status, created_at, assigned_at, due_at, data
  FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND document_id >= %(low)s AND document_id < %(high)s
"""
COUNTS = """
INSERT INTO handoff.owner_counts (tenant_id, owner, shard, assigned)
SELECT tenant_id, owner, 0, count(*) FROM handoff.document_state
 WHERE tenant_id = %(tenant)s AND owner IS NOT NULL GROUP BY 1, 2
"""


@dataclass(frozen=True)
class AuditRun:
    documents: int
    load_s: float
    audit_s: float
    peak_rss_mb: float
    breaches: int
    checks: dict[str, float]


def load(settings: HandoffSettings, tenant: str, documents: int) -> float:
    started = time.perf_counter()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        add_service(conn, "maker", tenant=tenant, can_create=True)
        for first in range(1, documents + 1, STEP):
            last = min(documents, first + STEP - 1)
            conn.execute(LOAD_STATE, {"tenant": tenant, "first": first, "last": last,
                                      "owners": OWNERS})  # fmt: skip
        # History in slices of the id space ('doc-1' .. 'doc-9…'), each a bounded statement.
        bounds = ["doc-", *(f"doc-{d}" for d in range(1, 10)), "doc-:"]
        for low, high in itertools.pairwise(bounds):
            conn.execute(LOAD_HISTORY, {"tenant": tenant, "low": low, "high": high})
        conn.execute(COUNTS, {"tenant": tenant})
        conn.execute("ANALYZE handoff.document_state, handoff.document_history")
    return time.perf_counter() - started


def clean(settings: HandoffSettings, tenant: str) -> None:
    remove_tenant(settings.database_url, tenant, ["maker"])


def audit_once(home: Path, tenant: str) -> tuple[float, float, dict[str, Any]]:
    """Run ``handoff audit`` as a process: seconds, peak RSS (MB), its JSON report."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "audit", "--tenant", tenant, "--json"],
        env={**os.environ, "HANDOFF_HOME": str(home)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # The report is small (a few rows per check): the pipe cannot fill while we sample.
    peak = peak_rss(proc)
    out, _ = proc.communicate()
    report: dict[str, Any] = json.loads(out)
    return time.perf_counter() - started, peak / 2**20, report


def run(
    settings: HandoffSettings, home: Path, sizes: list[int], say: Callable[[str], None]
) -> list[AuditRun]:
    results = []
    for documents in sizes:
        tenant = f"aud-{documents}-{uuid.uuid4().hex[:6]}"
        say(f"  {documents:,} documents: loading…")
        try:
            load_s = load(settings, tenant, documents)
            say(f"    loaded in {load_s:.1f} s; auditing…")
            seconds, peak, report = audit_once(home, tenant)
        finally:
            clean(settings, tenant)
        found: list[dict[str, Any]] = report["checks"]
        checks = {str(c["check"]): float(c["seconds"]) for c in found}
        breaches = sum(int(c["breaches"]) for c in found)
        if breaches:
            raise RuntimeError(f"a clean load audited with {breaches} breach(es): {report}")
        results.append(AuditRun(documents, load_s, seconds, peak, breaches, checks))
    return results
