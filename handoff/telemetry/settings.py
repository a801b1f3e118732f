"""The telemetry settings every process reads (``HANDOFF_LOG_FORMAT``, ``HANDOFF_OTEL_*``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from handoff.core.settings import ENV_PREFIX


class TelemetrySettings(BaseSettings):
    """How a process writes its log."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    log_format: Annotated[
        Literal["text", "json"],
        Field(
            description="text: one readable line per record; json: one JSON object per "
            "line with the tenant, document and event ids where "
            "the record has them (for a log shipper)."
        ),
    ] = "text"


class TracingSettings(BaseSettings):
    """OpenTelemetry tracing (telemetry/tracing.py); off unless an exporter is named.

    The exporters' own standard variables are read by the exporters themselves:
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and the rest of ``OTEL_EXPORTER_OTLP_*``),
    ``OTEL_EXPORTER_ZIPKIN_ENDPOINT``.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    otel_exporter: Annotated[
        Literal["none", "otlp", "zipkin", "console"],
        Field(
            description="none: no tracing, nothing stored; otlp: OTLP over HTTP "
            "(OTEL_EXPORTER_OTLP_ENDPOINT); zipkin: Zipkin's JSON API "
            "(OTEL_EXPORTER_ZIPKIN_ENDPOINT); console: spans printed (debugging)."
        ),
    ] = "none"
    otel_sample_ratio: Annotated[
        float,
        Field(
            ge=0.0,
            le=1.0,
            description="Share of new traces recorded (0..1); a trace that came with a "
            "sampled parent is always continued.",
        ),
    ] = 1.0
    otel_service_name: Annotated[
        str | None,
        Field(description="The service name spans carry; default: the process's kind."),
    ] = None
    otel_trace_url: Annotated[
        str | None,
        Field(
            description="Link from the tracker's document page to a trace UI, "
            "{trace_id} replaced (e.g. http://localhost:9411/zipkin/traces/{trace_id})."
        ),
    ] = None

    @field_validator("otel_trace_url")
    @classmethod
    def _a_link_template(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")) or "{trace_id}" not in value:
            raise ValueError(
                "HANDOFF_OTEL_TRACE_URL must be an http(s) URL with {trace_id} in it, "
                "e.g. http://localhost:9411/zipkin/traces/{trace_id}"
            )
        return value
