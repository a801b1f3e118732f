"""Batch 1 with units sent ahead (consumers/queued.py), on the real database and registry.

The in-process consumer is the runtime's Processor, fed real wire-format
events through the lane the runtime uses at batch 1 in one lane. Its
handler writes its effect as a deferred write, so its units can be queued.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY

from handoff.consumers import Event
from handoff.consumers.queued import QueuedLane
from handoff.core import HandoffTx
from handoff.core.errors import DatabaseUnavailable
from handoff.core.unit_queue import PREPARED_MAX
from handoff.stack.local import LocalStack
from tests.fix_consumer import (
    EFFECT,
    InProcess,
    effect_row,
    effects,
    noted,
    noted_unless_bad,
    quarantined,
    record,
)


def applied(admin: psycopg.Connection[Any], tenant: str) -> list[tuple[str, int]]:
    """(document, version) of every effect, in commit order."""
    return [(document, version) for _, document, _, version, _ in effects(admin, tenant)]


def prepared(consumer: InProcess) -> int:
    """Statements the queue prepared on the consumer's session."""
    row = consumer.conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'handoff_unit_%'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def outcome_count(outcome: str) -> float:
    labels = {"consumer": "audit", "outcome": outcome}
    return REGISTRY.get_sample_value("handoff_consumer_events_total", labels) or 0.0


def test_units_sent_ahead_apply_each_event_once_a_documents_in_order_and_finish_in_order(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(3, "a")
    for doc in "bcde":
        story(1, doc)
    p = story(1, "f")
    consumer = audit(noted)
    order = [p["a", 1, 1], p["a", 1, 2], p["a", 1, 3], p["b", 1, 1], None, p["c", 1, 1],
             p["d", 1, 1], None, None, p["e", 1, 1], p["f", 1, 1]]  # fmt: skip
    assert consumer.queue(*order) == list(range(len(order)))
    done = applied(admin, tenant)
    assert sorted(done) == sorted((d, v) for d, v in [("a", 1), ("a", 2), ("a", 3)]
                                  + [(doc, 1) for doc in "bcdef"])  # fmt: skip
    assert [v for d, v in done if d == "a"] == [1, 2, 3]
    # They went ahead: the statements seen twice were prepared, once each.
    assert 0 < prepared(consumer) <= 2


def test_a_redelivered_event_in_the_queue_is_refused_and_acknowledged_verdict_first(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    for doc in "ab":
        story(1, doc)
    p = story(1, "c")
    consumer = audit(noted)
    assert consumer.queue(p["a", 1, 1], p["b", 1, 1]) == [0, 1]
    duplicates = outcome_count("duplicate")
    unclaimed = (
        REGISTRY.get_sample_value("handoff_consumer_unclaimed_total", {"consumer": "audit"}) or 0
    )
    # a again, with b and c queued behind it: its claim refuses, the rest go on.
    assert consumer.queue(p["a", 1, 1], p["b", 1, 1], p["c", 1, 1], ahead=2) == [0, 1, 2]
    assert sorted(applied(admin, tenant)) == [("a", 1), ("b", 1), ("c", 1)]
    assert outcome_count("duplicate") == duplicates + 2
    assert (
        REGISTRY.get_sample_value("handoff_consumer_unclaimed_total", {"consumer": "audit"})
        == unclaimed + 2
    )
    assert quarantined(admin, tenant) == []


def test_a_unit_the_database_fails_counts_as_an_attempt_and_the_one_behind_it_applies(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(1, "bad")
    p = story(1, "good")
    runs: list[str] = []

    def fails_in_the_database(event: Event, tx: HandoffTx) -> None:
        runs.append(event.document_id)
        noted_unless_bad(event, tx)

    consumer = audit(fails_in_the_database, max_deliveries=3)
    assert consumer.queue(p["bad", 1, 1], p["good", 1, 1]) == [0, 1]
    assert applied(admin, tenant) == [("good", 1)]
    [entry] = quarantined(admin, tenant)
    # The queued unit was the first of three attempts: the handler ran three times.
    assert (entry["document_id"], entry["category"], entry["attempts"]) == (
        "bad",
        "handler_error",
        3,
    )
    assert runs.count("bad") == 3 and "NotNullViolation" in entry["error"]


def test_a_refused_handoff_sent_ahead_is_an_invalid_transition_quarantined_at_once(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(1, "x")
    p = story(1, "y")

    def hands_to_a_stranger(event: Event, tx: HandoffTx) -> None:
        noted(event, tx)
        if event.document_id == "x":  # audit does not own x: refused at the commit
            tx.hand_on(event, "routed", to="audit", status="taken", wait=False)

    consumer = audit(hands_to_a_stranger)
    assert consumer.queue(p["x", 1, 1], p["y", 1, 1]) == [0, 1]
    assert applied(admin, tenant) == [("y", 1)]
    [entry] = quarantined(admin, tenant)
    assert (entry["document_id"], entry["category"], entry["attempts"]) == (
        "x",
        "invalid_transition",
        1,
    )
    assert "OwnershipMismatch" in entry["error"]


def test_a_handler_that_raises_is_run_again_the_usual_way_and_counted_from_there(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(1, "bad")
    p = story(1, "good")
    runs: list[str] = []

    def fragile(event: Event, tx: HandoffTx) -> None:
        runs.append(event.document_id)
        if event.document_id == "bad":
            raise RuntimeError("downstream refuses bad")
        noted(event, tx)

    consumer = audit(fragile, max_deliveries=3)
    assert consumer.queue(p["bad", 1, 1], p["good", 1, 1]) == [0, 1]
    assert applied(admin, tenant) == [("good", 1)]
    [entry] = quarantined(admin, tenant)
    assert (entry["category"], entry["attempts"]) == ("handler_error", 3)
    # The run while its unit was being made (whether the event was to be applied was
    # not known yet) is not counted; then max deliveries.
    assert runs.count("bad") == 4


def test_a_handler_that_reads_in_its_unit_goes_the_usual_way_and_is_remembered(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    for doc in "ab":
        story(1, doc)
    p = story(1, "c")
    consumer = audit(record)  # tx.execute: its result could be read
    assert consumer.queue(p["a", 1, 1], p["b", 1, 1], p["c", 1, 1]) == [0, 1, 2]
    assert sorted(applied(admin, tenant)) == [("a", 1), ("b", 1), ("c", 1)]
    assert prepared(consumer) == 0  # nothing went ahead
    assert consumer.processor.queued_unit([consumer.item(p["a", 1, 1])]) is None


def test_statements_made_anew_each_time_keep_the_prepared_ones_bounded(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    docs = [f"n{i}" for i in range(PREPARED_MAX + 10)]
    for doc in docs:
        p = story(1, doc)

    def inlined(event: Event, tx: HandoffTx) -> None:
        # A text of its own per event, written twice: the second is prepared, while
        # names last.
        text: Any = f"{EFFECT} -- {event.document_id}"
        for suffix in ("", "-2"):
            tx.write(text, effect_row(event, event.event_id + suffix))

    consumer = audit(inlined)
    assert consumer.queue(*(p[doc, 1, 1] for doc in docs)) == list(range(len(docs)))
    assert len(applied(admin, tenant)) == 2 * len(docs)
    assert prepared(consumer) == PREPARED_MAX


def test_a_lost_connection_stops_the_lane_and_what_was_not_done_applies_once_after(
    story: Any,
    audit: Callable[..., InProcess],
    admin: psycopg.Connection[Any],
    tenant: str,
    local_stack: LocalStack,
) -> None:
    docs = [f"k{i}" for i in range(8)]
    for doc in docs:
        p = story(1, doc)
    consumer: InProcess | None = None

    def cut_off(event: Event, tx: HandoffTx) -> None:
        noted(event, tx)
        if event.document_id == "k4" and consumer is not None:  # units k2, k3 in flight
            with psycopg.connect(local_stack.postgres.superuser_url()) as su:
                su.execute("SELECT pg_terminate_backend(%s)", (consumer.conn.info.backend_pid,))

    consumer = audit(cut_off)
    done: list[int] = []
    items = [(n, [consumer.item(p[doc, 1, 1])]) for n, doc in enumerate(docs)]
    with pytest.raises(DatabaseUnavailable):
        QueuedLane[int](consumer.processor, 1).run(items, done.append)
    assert done == list(range(len(done))) and len(done) < len(docs)
    again = audit(noted)  # a new connection, as the runtime's reconnect makes
    assert again.queue(*(p[doc, 1, 1] for doc in docs)) == list(range(len(docs)))
    assert sorted(applied(admin, tenant)) == sorted((doc, 1) for doc in docs)


def test_batches_sent_ahead_apply_once_and_a_shared_document_waits_its_turn(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(2, "a")
    for doc in "bcd":
        story(1, doc)
    p = story(1, "e")
    consumer = audit(noted)
    # Three batches: the third shares "a" with the first, so it waits for that outcome.
    batches = [[p["a", 1, 1], p["b", 1, 1]], [p["c", 1, 1], p["d", 1, 1]],
               [p["a", 1, 2], p["e", 1, 1]]]  # fmt: skip
    duplicates = outcome_count("duplicate")
    assert consumer.queue(*batches, ahead=2) == [0, 1, 2]
    done = applied(admin, tenant)
    assert sorted(done) == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("d", 1), ("e", 1)]
    assert [v for d, v in done if d == "a"] == [1, 2]
    assert outcome_count("duplicate") == duplicates
    assert prepared(consumer) > 0


def test_a_batch_whose_claim_refuses_goes_verdict_first_and_applies_the_rest_once(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    for doc in "abc":
        story(1, doc)
    p = story(1, "d")
    consumer = audit(noted)
    assert consumer.queue([p["a", 1, 1]]) == [0]
    duplicates = outcome_count("duplicate")
    # "a" again inside a batch: the batch's claim refuses it whole; verdict first, "a" is
    # a duplicate and the others apply, once.
    assert consumer.queue([p["b", 1, 1], p["a", 1, 1], p["c", 1, 1]], [p["d", 1, 1]]) == [0, 1]
    assert sorted(applied(admin, tenant)) == [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
    assert outcome_count("duplicate") == duplicates + 1
    assert quarantined(admin, tenant) == []


def test_a_batch_the_database_fails_is_taken_one_event_at_a_time_and_only_the_bad_one_set_aside(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    for doc in ("ok1", "bad"):
        story(1, doc)
    p = story(1, "ok2")

    consumer = audit(noted_unless_bad, max_deliveries=2)
    assert consumer.queue([p["ok1", 1, 1], p["bad", 1, 1], p["ok2", 1, 1]]) == [0]
    assert sorted(applied(admin, tenant)) == [("ok1", 1), ("ok2", 1)]
    [entry] = quarantined(admin, tenant)
    assert (entry["document_id"], entry["category"]) == ("bad", "handler_error")


def test_with_tracing_at_ratio_0_a_traced_event_goes_alone_and_the_rest_go_ahead(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from handoff.telemetry import tracing
    from handoff.telemetry.settings import TracingSettings

    for doc in "ab":
        story(1, doc)
    p = story(1, "c")
    exporter = InMemorySpanExporter()
    tracing.configure("test", TracingSettings(otel_exporter="console", otel_sample_ratio=0.0),
                      exporter=exporter)  # fmt: skip
    try:
        assert tracing.enabled() and not tracing.starts_traces()
        consumer = audit(noted)
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        traced = consumer.item(p["b", 1, 1],
                               {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})  # fmt: skip
        units = [(0, [consumer.item(p["a", 1, 1])]), (1, [traced]),
                 (2, [consumer.item(p["c", 1, 1])])]  # fmt: skip
        done: list[int] = []
        QueuedLane[int](consumer.processor, 1).run(units, done.append)
        assert done == [0, 1, 2]
        assert sorted(applied(admin, tenant)) == [("a", 1), ("b", 1), ("c", 1)]
        # b's unit went alone and continued its trace; a and c went ahead, untraced.
        spans = [s for s in exporter.get_finished_spans() if s.name == "consume audit"]
        assert [format(s.context.trace_id, "032x") for s in spans] == [trace_id]
        assert consumer.processor.queued_unit([traced]) is None
        assert consumer.processor.queued_unit([consumer.item(p["a", 1, 1])]) is not None
    finally:
        tracing.configure("test", TracingSettings(otel_exporter="none"))
