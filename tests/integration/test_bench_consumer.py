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

from benchmarks import consumer
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
        result = consumer.run(settings, local_stack.layout.home, 300, 100, 100.0, 2.0, seen.append)
    finally:
        consumer.Bench.prepare = original  # type: ignore[method-assign]
    assert result.batched.events == result.single.events == result.lanes.events == 300
    for rate in (result.bare.per_s, result.batched.per_s, result.single.per_s,
                 result.lanes.per_s, result.pgbench_tps, result.guarded_tps):  # fmt: skip
        assert rate > 0 and math.isfinite(rate)
    assert result.hop_events > 0 and 0 < result.hop_p50_ms <= result.hop_p99_ms
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
