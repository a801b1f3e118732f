"""The emit benchmark, short and bounded: it runs every driver, meters PostgreSQL's CPU
per transaction and leaves no tenant behind.

Its figures are not checked here (timing assertions flake on shared
machines); ``make bench`` measures them.
"""

from __future__ import annotations

import math
import re
from typing import Any

import psycopg
import pytest
from rich.console import Console

from benchmarks import emit_bench, pgbench
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack

pytestmark = pytest.mark.slow


def test_the_emit_benchmark_meters_postgres_per_transaction_and_cleans_up(
    local_stack: LocalStack, migrated: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    def tenants() -> set[str]:
        rows = admin.execute(
            "SELECT DISTINCT tenant_id FROM handoff.services WHERE tenant_id LIKE 'bench-%'"
        ).fetchall()
        return {row[0] for row in rows}

    before = tenants()
    report = emit_bench.run(2, [1], Console())
    assert "| 1 | pgbench |" in report and "| 1 | python |" in report
    # PostgreSQL's CPU-ms per transaction: tpcb-like, the emit, and their ratio.
    match = re.search(r"^\| 1 \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \|$", report, re.M)
    assert match, report
    tpcb_ms, emit_ms, ratio = (float(x) for x in match.groups())
    assert 0 < tpcb_ms < 1000 and 0 < emit_ms < 1000, report
    assert math.isclose(ratio, tpcb_ms / emit_ms, abs_tol=0.01)
    assert tenants() == before, "the benchmark's tenant is left"


def test_pgbench_is_initialised_again_after_an_init_that_did_not_finish(
    local_stack: LocalStack,
) -> None:
    # An interrupted `pgbench -i` (Ctrl-C, or a scale it refused) leaves the
    # database without its tables; every later run then failed on them.
    superuser = local_stack.postgres.superuser_url()
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {pgbench.DATABASE}")
        conn.execute(f"CREATE DATABASE {pgbench.DATABASE}")
    pgbench.prepare(superuser, scale=1)
    bench_url = superuser.rsplit("/", 1)[0] + f"/{pgbench.DATABASE}"
    with psycopg.connect(bench_url) as bench:
        assert bench.execute("SELECT count(*) FROM pgbench_branches").fetchone() == (1,)
