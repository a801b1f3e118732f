"""One trace across every hop: OpenTelemetry spans and the W3C trace context they pass on.

A handoff's trace goes: the request that emits (the API's span, continuing the
caller's ``traceparent``) → the relay's publish → the consumer's unit (claim,
handler, its emit) → the next relay publish → … and from a unit that records an
effect, the executor's call to the provider. Between processes the context
travels as data, never as a live connection:

- the emitting transaction sets ``handoff.trace`` (``emit_sql.SET_TRACE``), and the rows
  it writes (history, outbox, effect intents) take it as their column default
  (migration 0025_trace), so the context commits with the handoff or not at all;
- the relay sends the outbox row's context as the ``traceparent`` header (and
  ``ce_traceparent``, the CloudEvents distributed-tracing extension);
- the consumer continues the header's context, and the executor the intent's,
  sending its own as the provider request's ``traceparent`` header.

Why the database setting and not an argument of the emit functions: every function
that writes those rows stays as it is (on one PostgreSQL and on Citus), a unit's
effect intents get the same context without a word more, and with tracing off the
setting is never set: the column default reads an unset setting and stores NULL,
which is what "tracing off costs nothing measurable" asks.

Only sampled contexts are passed on: an unsampled span exports nothing, and a
consumer given no context starts a root that the same ratio samples or not.

Off unless ``HANDOFF_OTEL_EXPORTER`` names an exporter. ``otlp`` honours the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and ``…_TRACES_ENDPOINT``, headers,
timeout); ``zipkin`` honours ``OTEL_EXPORTER_ZIPKIN_ENDPOINT``.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from handoff.core.trace_context import caller_traceparent, valid
from handoff.telemetry.settings import TracingSettings

log = logging.getLogger("handoff.tracing")

# A batch unit's span links the events it took that came with a trace, up to this many.
MAX_LINKS = 64

_PROPAGATOR = TraceContextTextMapPropagator()


class _State:
    """This process's tracer (None: tracing off) and settings."""

    tracer: trace.Tracer | None = None
    provider: Any = None
    settings = TracingSettings()


_state = _State()


def configure(
    service_name: str, settings: TracingSettings | None = None, exporter: Any = None
) -> bool:
    """Tracing for this process, when its settings name an exporter; True when on.

    Called once by each long-running process (the API, the relay, a consumer, an
    executor), with its own service name (``HANDOFF_OTEL_SERVICE_NAME`` wins).
    ``exporter``: a span exporter to use instead of the one the settings name (the
    unit tests' in-memory one), sent to at once rather than in batches.
    """
    _state.settings = current = settings or TracingSettings()
    if current.otel_exporter == "none":
        _state.tracer = None
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: current.otel_service_name or service_name}),
        sampler=ParentBased(TraceIdRatioBased(current.otel_sample_ratio)),
    )
    provider.add_span_processor(
        SimpleSpanProcessor(exporter)
        if exporter is not None
        else BatchSpanProcessor(_exporter(current.otel_exporter))
    )
    # Spans still queued go out when the process ends (a stopped consumer's last units).
    atexit.register(provider.shutdown)
    _state.provider, _state.tracer = provider, provider.get_tracer("handoff")
    log.info(
        "tracing to %s, sampling %s of new traces",
        current.otel_exporter,
        current.otel_sample_ratio,
    )
    return True


def _exporter(kind: str) -> Any:
    if kind == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if kind == "zipkin":
        from opentelemetry.exporter.zipkin.json import ZipkinExporter

        return ZipkinExporter()
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter()


def enabled() -> bool:
    return _state.tracer is not None


def starts_traces() -> bool:
    """Whether a unit given no trace context may start a recorded one: tracing on, and a
    sampling ratio above 0. With ratio 0 only what arrives with a sampled context is
    traced, and a consumer may send the other units ahead (consumers/queued.py)."""
    return _state.tracer is not None and _state.settings.otel_sample_ratio > 0


def shutdown() -> None:
    """Export what is queued now (a process about to stop)."""
    if _state.provider is not None:
        _state.provider.force_flush()


def context_of(traceparent: str | None) -> otel_context.Context | None:
    """The remote parent a ``traceparent`` names (None: none, or not a valid one)."""
    if valid(traceparent) is None:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


def current_traceparent() -> str | None:
    """The traceparent of the current span, if there is a sampled one (with tracing off,
    None at once: the units ask for it on every attempt)."""
    return caller_traceparent() if _state.tracer is not None else None


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current sampled span, for a log line."""
    if _state.tracer is None:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not (ctx.is_valid and ctx.trace_flags.sampled):
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def span(
    name: str,
    *,
    parent: str | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    links: Iterable[str | None] = (),
) -> AbstractContextManager[Span | None]:
    """A span named ``name`` while the block runs, None when tracing is off.

    ``parent``: a ``traceparent`` from another process (a header, a row), else the
    current span is the parent. ``links``: contexts the span follows from but is not
    a child of (a batch's events; at most ``MAX_LINKS``).

    Off, it is one shared do-nothing context: the hot paths that open spans (a
    consumer's unit opens three) pay a function call, not a generator.
    """
    if _state.tracer is None:
        return _OFF
    return _span(_state.tracer, name, parent, kind, attributes, links)


_OFF: AbstractContextManager[None] = nullcontext()


def emit_span(name: str, attributes: dict[str, Any]) -> AbstractContextManager[Span | None]:
    """A unit's emit as a span: what a consumer or an executor sets as ``HandoffTx.spans``."""
    return span(name, kind=SpanKind.PRODUCER, attributes=attributes)


@contextmanager
def _span(
    tracer: trace.Tracer,
    name: str,
    parent: str | None,
    kind: SpanKind,
    attributes: Mapping[str, Any] | None,
    links: Iterable[str | None],
) -> Iterator[Span]:
    linked = [Link(_span_context(c)) for c in map(context_of, links) if c is not None]
    with tracer.start_as_current_span(
        name,
        context=context_of(parent),
        kind=kind,
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        links=linked[:MAX_LINKS],
    ) as current:
        yield current


def _span_context(ctx: otel_context.Context) -> trace.SpanContext:
    return trace.get_current_span(ctx).get_span_context()


def trace_url(trace_id: str) -> str | None:
    """Where a person reads a trace (``HANDOFF_OTEL_TRACE_URL`` with ``{trace_id}``)."""
    template = _state.settings.otel_trace_url
    return template.replace("{trace_id}", trace_id) if template else None


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id part of a stored ``traceparent``."""
    found = valid(traceparent)
    return found[3:35] if found else None
