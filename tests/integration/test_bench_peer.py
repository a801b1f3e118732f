"""``bench peer``, short and bounded: the relay and Debezium (real Kafka Connect, a real
logical-WAL PostgreSQL) through every scenario, and nothing left behind.

The figures are not compared here (timing assertions flake on shared
machines); what is checked is what cannot depend on the machine: every row
reached the topic, nothing was reordered per key, and the clean-up.
"""

from __future__ import annotations

import math

import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from benchmarks import peer
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack

pytestmark = pytest.mark.slow


def test_the_peer_benchmark_runs_both_publishers_through_every_scenario_and_cleans_up(
    local_stack: LocalStack, settings: HandoffSettings
) -> None:
    seen: list[str] = []
    made: list[peer.Peer] = []
    original = peer.Peer.prepare

    def remember(self: peer.Peer) -> None:
        made.append(self)
        original(self)

    peer.Peer.prepare = remember  # type: ignore[method-assign]
    try:
        measured = peer.runs(local_stack, settings, 3000, 200.0, 2.0, 1, seen.append)
    finally:
        peer.Peer.prepare = original  # type: ignore[method-assign]

    assert set(measured) == {"handoff relay", "Debezium"}
    for name, (outcome,) in measured.items():
        for drain in (outcome.one_row, outcome.bulk):
            assert drain.events_per_s > 0 and math.isfinite(drain.events_per_s), name
            assert drain.start_s > 0 and drain.cpu_s > 0 and drain.rss_mb > 0, name
        assert outcome.steady.events >= 300, name  # 200/s for 2 s, every one delivered
        assert 0 < outcome.steady.p50_ms <= outcome.steady.p99_ms, name
        # Duplicates are allowed by both contracts; a version delivered for the first
        # time after a later one of its document is not.
        assert outcome.killed.reorders == 0, name
        assert outcome.killed.duplicates >= 0 and outcome.killed.recovered_s > 0, name

    report = peer.table(measured, 3000, 200.0)
    assert "| drain, 3,000 one-row transactions (events/s) |" in report
    assert "Caveats" in report

    [bench] = made
    assert not bench.db.data.parent.exists(), "the peer PostgreSQL's folder is left behind"
    assert bench.db.pid() is None
    assert bench.worker is not None and bench.worker.pid() is None
    topics = AdminClient({"bootstrap.servers": settings.kafka_bootstrap}).list_topics(timeout=10)
    assert len(bench.topics) == 8
    assert not set(bench.topics) & set(topics.topics)
