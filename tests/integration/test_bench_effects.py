"""The effects benchmark, short and bounded: it runs end to end and leaves nothing behind.

Its figures are not checked here (timing assertions flake on shared
machines); ``make bench`` measures them.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

from benchmarks import effects
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack

pytestmark = pytest.mark.slow


def test_the_effects_benchmark_runs_every_part_and_cleans_up(
    local_stack: LocalStack, migrated: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    seen: list[str] = []
    benches: list[effects.Bench] = []
    original = effects.Bench.prepare

    def remember(self: effects.Bench, latency_ms: int) -> None:
        benches.append(self)
        original(self, latency_ms)

    effects.Bench.prepare = remember  # type: ignore[method-assign]
    try:
        result = effects.run(migrated, local_stack.layout.home, [(1, 1), (2, 2)], 20, 5,
                             seen.append)  # fmt: skip
    finally:
        effects.Bench.prepare = original  # type: ignore[method-assign]
    assert [(r.executors, r.processes) for r in result.runs] == [(1, 1), (2, 2)]
    for run in result.runs:
        assert run.effects == max(20 * run.executors, 100)
        assert run.per_s > 0 and math.isfinite(run.per_s) and run.bare_per_s > 0
    assert result.reconciled == result.unknown > 0
    assert 0 < result.reconcile_p50_ms <= result.reconcile_max_ms
    assert any("removing" in line for line in seen)

    [bench] = benches
    for table in ("services", "effect_intents"):
        row = admin.execute(
            f"SELECT count(*) FROM handoff.{table} WHERE tenant_id = %s", (bench.tenant,)
        ).fetchone()
        assert row == (0,), f"{table} keeps rows of {bench.tenant}"
    assert bench.provider is not None and bench.provider.poll() is not None
    assert not bench.folder.exists()
