"""The consumer benchmark, short and bounded: it runs end to end and leaves nothing behind.

Its figures are not checked here (timing assertions flake on shared
machines); ``make bench`` measures them.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from benchmarks import consumer, hop
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack

pytestmark = pytest.mark.slow


def test_the_consumer_benchmark_runs_every_part_and_cleans_up(
    local_stack: LocalStack, effects_table: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    settings = effects_table
    seen: list[str] = []
    benches: list[consumer.Bench] = []
    original = consumer.Bench.prepare

    def remember(self: consumer.Bench) -> None:
        benches.append(self)
        original(self)

    consumer.Bench.prepare = remember  # type: ignore[method-assign]
    try:
        result = consumer.run(settings, local_stack.layout.home, 300, 100, 100.0, 2.0, seen.append,
                              hop.stack_pids(local_stack))  # fmt: skip
    finally:
        consumer.Bench.prepare = original  # type: ignore[method-assign]
    runs = (result.batched, result.single, result.alone, result.lanes)
    assert [run.events for run in runs] == [300] * 4
    for rate in (result.bare.per_s, result.batched.per_s, result.single.per_s,
                 result.alone.per_s, result.lanes.per_s, result.pgbench_tps, result.guarded_tps,
                 result.claimed_tps, result.floor_tps, result.python_tps):  # fmt: skip
        assert rate > 0 and math.isfinite(rate)
    # Batch 1's window (300 units, each a round trip) is long enough for every part to
    # use measurable CPU; the batched window may be a few ticks, so only present and sane.
    for part in ("consumer", "postgres", "machine"):
        assert result.single.cpu_ms[part] > 0, part
        assert math.isfinite(result.batched.cpu_ms[part]) and result.batched.cpu_ms[part] >= 0
    assert "pacer" not in result.single.cpu_ms
    assert result.hop.handoffs > 0 and 0 < result.hop.p50_ms <= result.hop.p99_ms
    _check_breakdown(result.hop)
    assert any("removing" in line for line in seen)

    [bench] = benches
    tenant = bench.tenant
    for table in ("services", "document_state", "outbox", "consumer_guards", "receipts"):
        row = admin.execute(
            f"SELECT count(*) FROM handoff.{table} WHERE tenant_id = %s", (tenant,)
        ).fetchone()
        assert row == (0,), f"{table} keeps rows of {tenant}"
    assert admin.execute(
        "SELECT count(*) FROM handoff_bench.effects WHERE tenant_id = %s", (tenant,)
    ).fetchone() == (0,)
    topics = AdminClient({"bootstrap.servers": settings.kafka_bootstrap}).list_topics(timeout=10)
    assert not set(bench.topics) & set(topics.topics)


def _check_breakdown(run: hop.HopRun) -> None:
    """Every segment measured, each mark after the one before, the CPU of every part."""
    assert [s.label for s in run.segments][: len(hop.SEGMENTS)] == [s[0] for s in hop.SEGMENTS]
    for segment in run.segments:
        assert math.isfinite(segment.p50_ms) and segment.p50_ms <= segment.p99_ms
        # The broker's clock is in milliseconds and occurredAt is the emit's start: a mark
        # may read up to a millisecond before the one it follows, never more.
        assert segment.p50_ms > -1.5, segment
    # The segments add up to the hop (medians do not add exactly; their sum is near).
    assert sum(s.p50_ms for s in run.segments[: len(hop.SEGMENTS)]) < run.p99_ms + 5
    for part in ("postgres", "kafka", "relay", "consumer", "pacer", "machine"):
        assert run.cpu_ms[part] > 0, part


def test_the_hop_benchmark_runs_twice_and_cleans_up(
    local_stack: LocalStack, effects_table: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    seen: list[str] = []
    runs = hop.runs(effects_table, local_stack.layout.home, 100.0, 1.5, 2,
                    hop.stack_pids(local_stack), seen.append)  # fmt: skip
    assert len(runs) == 2 and all(r.handoffs > 0 for r in runs)
    for run in runs:
        _check_breakdown(run)
    assert sum(line.startswith("  run ") for line in seen) == 2
    [per_run, segments, cpu] = hop.tables(runs)
    assert per_run.count("\n") == 3  # header, rule, two runs
    assert "broker append -> consumer poll" in segments and " to " in segments
    assert "postgres" in cpu
    assert admin.execute(
        "SELECT count(*) FROM handoff.services WHERE tenant_id LIKE 'cbench-%%'"
        "   AND name = 'bench-hop'"
    ).fetchone() == (0,)
