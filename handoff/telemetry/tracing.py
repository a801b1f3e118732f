"""OpenTelemetry for a Handoff process: set up once, or not at all.

Off (the default), nothing of OpenTelemetry's SDK is imported and every
helper here returns at its first line: tracing off costs a process one
attribute test per call site. On (``HANDOFF_OTEL_ENABLED=true``), ``setup``
installs a tracer provider with a parent-based ratio sampler and the chosen
exporter, and the W3C trace context travels with each change (see
README "Tracing").
"""

from __future__ import annotations

import atexit
import logging
from typing import TYPE_CHECKING, Any

from handoff.telemetry.settings import TelemetrySettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("handoff.telemetry")


class _State:
    """The process's tracer provider, once set up (None: tracing is off)."""

    provider: TracerProvider | None = None


def enabled() -> bool:
    return _State.provider is not None


def setup(service_name: str, settings: TelemetrySettings | None = None) -> bool:
    """Tracing for this process as ``service_name`` (OTEL_SERVICE_NAME wins), when the
    settings turn it on; True if they did. A second call keeps the first provider."""
    settings = settings or TelemetrySettings()
    if not settings.otel_enabled or _State.provider is not None:
        return _State.provider is not None
    from opentelemetry import trace
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create({"service.name": service_name}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.otel_sample_ratio))
    )
    provider.add_span_processor(BatchSpanProcessor(_exporter(settings)))
    trace.set_tracer_provider(provider)
    _State.provider = provider
    # Spans still in the batch go out when the process ends (SIGTERM's orderly stop
    # returns from main; a SIGKILL loses at most the last batch's spans, never work).
    atexit.register(provider.shutdown)
    log.info(
        "tracing on: %s exporter, sampling %.0f%% of new traces",
        settings.otel_exporter, 100 * settings.otel_sample_ratio,
    )  # fmt: skip
    return True


def _exporter(settings: TelemetrySettings) -> SpanExporter:
    if settings.otel_exporter == "zipkin":
        from opentelemetry.exporter.zipkin.json import ZipkinExporter

        return ZipkinExporter(endpoint=settings.otel_zipkin_endpoint)
    if settings.otel_exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    # OTLP over HTTP reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT and _HEADERS itself.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def shutdown() -> None:
    """Export what is pending and stop (tests; processes do it at exit)."""
    if _State.provider is not None:
        _State.provider.shutdown()
        _State.provider = None


def current_ids() -> dict[str, Any]:
    """``traceId`` and ``spanId`` of the current span, hex as in a traceparent; {} without."""
    if _State.provider is None:
        return {}
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"traceId": f"{context.trace_id:032x}", "spanId": f"{context.span_id:016x}"}
