"""telemetry/tracing.py against OpenTelemetry's SDK, spans caught by the SDK's own
in-memory exporter (a fake of the export side only: every span is made by the SDK
as in production)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from handoff.core import trace_context
from handoff.relay.kafka_io import headers
from handoff.telemetry import tracing
from handoff.telemetry.settings import TracingSettings

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


@pytest.fixture
def spans_in_memory_exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure("unit", TracingSettings(otel_exporter="console"), exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.configure("unit", TracingSettings(otel_exporter="none"))


def test_off_a_span_is_the_shared_do_nothing_context() -> None:
    tracing.configure("unit", TracingSettings(otel_exporter="none"))
    assert not tracing.enabled()
    with tracing.span("anything", parent=PARENT) as span:
        assert span is None
        assert tracing.current_traceparent() is None
        assert trace_context.caller_headers() == {}
    assert tracing.span("a") is tracing.span("b")


def test_only_well_formed_version_00_contexts_are_passed_on() -> None:
    assert trace_context.valid(PARENT) == PARENT
    for wrong in (None, "", PARENT.upper(), PARENT + "-x", "01" + PARENT[2:], "00-zz" + PARENT[5:]):
        assert trace_context.valid(wrong) is None
        assert tracing.context_of(wrong) is None
    assert tracing.trace_id_of(PARENT) == "0af7651916cd43dd8448eb211c80319c"
    assert tracing.trace_id_of("garbage") is None


def test_a_span_continues_its_parents_trace_and_passes_its_own_context_in_memory_exporter(
    spans_in_memory_exporter: InMemorySpanExporter,
) -> None:
    with tracing.span("emit create", parent=PARENT, kind=SpanKind.SERVER,
                      attributes={"handoff.document": "d-1", "dropped": None}) as span:  # fmt: skip
        assert span is not None
        mine = trace_context.traceparent_of(span)
        assert mine is not None and mine != PARENT
        assert mine.startswith("00-0af7651916cd43dd8448eb211c80319c-") and mine.endswith("-01")
        assert tracing.current_traceparent() == mine
        assert trace_context.caller_traceparent() == mine
        assert trace_context.caller_headers() == {"traceparent": mine}
        with tracing.span("claim") as child:
            assert child is not None
            assert tracing.current_traceparent() != mine
    (claim, emit) = spans_in_memory_exporter.get_finished_spans()
    assert emit.name == "emit create" and emit.kind is SpanKind.SERVER
    assert emit.parent is not None and f"{emit.parent.span_id:016x}" == "b7ad6b7169203331"
    assert emit.attributes == {"handoff.document": "d-1"}
    assert claim.parent is not None and claim.parent.span_id == emit.context.span_id
    assert emit.resource.attributes["service.name"] == "unit"


def test_an_unsampled_parent_is_continued_unsampled_and_nothing_is_passed_in_memory_exporter(
    spans_in_memory_exporter: InMemorySpanExporter,
) -> None:
    with tracing.span("consume review", parent=UNSAMPLED) as span:
        assert span is not None
        assert trace_context.traceparent_of(span) is None
        assert trace_context.caller_headers() == {}
    assert spans_in_memory_exporter.get_finished_spans() == ()


def test_a_batch_links_at_most_max_links_contexts_in_memory_exporter(
    spans_in_memory_exporter: InMemorySpanExporter,
) -> None:
    carried = [f"00-{n:032x}-{n:016x}-01" for n in range(1, tracing.MAX_LINKS + 10)]
    with tracing.span("consume review", links=[*carried, None, "not one"]):
        pass
    (batch,) = spans_in_memory_exporter.get_finished_spans()
    assert batch.parent is None
    assert len(batch.links) == tracing.MAX_LINKS
    assert batch.links[0].context.trace_id == 1


def test_the_relay_sends_the_context_as_w3c_and_cloudevents_headers() -> None:
    payload = {
        "eventId": "e-1", "eventType": "created", "owner": "review", "tenantId": "t-1",
        "version": 1, "source": "creator", "occurredAt": 1_764_000_000_123_456,
        "documentId": "d-1",
    }  # fmt: skip
    plain = headers(payload)
    traced = dict(headers(payload, PARENT))
    assert traced["traceparent"] == traced["ce_traceparent"] == PARENT.encode()
    assert len(headers(payload, PARENT)) == len(plain) + 2
    assert "traceparent" not in dict(plain)


def test_the_trace_link_must_be_an_http_url_with_the_trace_id_in_it() -> None:
    good = TracingSettings(otel_trace_url="http://localhost:9411/zipkin/traces/{trace_id}")
    assert good.otel_trace_url is not None
    for bad in ("localhost:9411/{trace_id}", "http://localhost:9411/", "javascript:{trace_id}"):
        with pytest.raises(ValidationError, match="HANDOFF_OTEL_TRACE_URL"):
            TracingSettings(otel_trace_url=bad)
    with pytest.raises(ValidationError):
        TracingSettings(otel_sample_ratio=1.5)


def test_only_a_ratio_above_0_lets_a_unit_start_a_recorded_trace() -> None:
    tracing.configure("unit", TracingSettings(otel_exporter="none"))
    assert not tracing.starts_traces()
    try:
        tracing.configure("unit", TracingSettings(otel_exporter="console", otel_sample_ratio=0.0),
                          exporter=InMemorySpanExporter())  # fmt: skip
        assert tracing.enabled() and not tracing.starts_traces()
        tracing.configure("unit", TracingSettings(otel_exporter="console", otel_sample_ratio=0.5),
                          exporter=InMemorySpanExporter())  # fmt: skip
        assert tracing.starts_traces()
    finally:
        tracing.configure("unit", TracingSettings(otel_exporter="none"))
