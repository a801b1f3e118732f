"""The telemetry settings every process reads (``HANDOFF_LOG_FORMAT``, ``HANDOFF_OTEL_*``).

The OpenTelemetry SDK's own variables are honoured as well: an OTLP exporter
reads ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and ``…_TRACES_ENDPOINT``, ``…_HEADERS``),
the resource ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from handoff.core.settings import ENV_PREFIX


class TelemetrySettings(BaseSettings):
    """Logs and traces. Off by default: a process without them costs nothing extra."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    log_format: Annotated[
        Literal["text", "json"],
        Field(
            description="text: one readable line per record; json: one JSON object per "
            "line with the trace and span ids, the tenant, document and event ids where "
            "the record has them (for a log shipper)."
        ),
    ] = "text"
    otel_enabled: Annotated[
        bool,
        Field(
            description="Trace with OpenTelemetry: the emitting request's W3C traceparent "
            "(or a new trace) is stored with the outbox row, sent as a Kafka header, "
            "continued by consumers, carried into the effect ledger and to the provider."
        ),
    ] = False
    otel_exporter: Annotated[
        Literal["otlp", "zipkin", "console"],
        Field(
            description="Where spans go: otlp (HTTP/protobuf to OTEL_EXPORTER_OTLP_ENDPOINT, "
            "default http://localhost:4318), zipkin (HANDOFF_OTEL_ZIPKIN_ENDPOINT) or "
            "console (standard output, for a look)."
        ),
    ] = "otlp"
    otel_zipkin_endpoint: Annotated[
        str, Field(description="Zipkin's span API, for otel_exporter=zipkin.")
    ] = "http://127.0.0.1:9411/api/v2/spans"
    otel_sample_ratio: Annotated[
        float,
        Field(
            ge=0.0,
            le=1.0,
            description="Share of new traces recorded (0 to 1). A trace continued from a "
            "caller follows the caller's decision, so one trace is whole or absent.",
        ),
    ] = 1.0
    trace_url_template: Annotated[
        str | None,
        Field(
            description="A trace UI's page for a trace, with {trace_id} in it, e.g. "
            "http://127.0.0.1:9411/zipkin/traces/{trace_id}: the tracker links each "
            "version's trace there.",
            pattern=r"\{trace_id\}",
        ),
    ] = None
