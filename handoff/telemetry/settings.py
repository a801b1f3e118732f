"""The telemetry settings every process reads (``HANDOFF_LOG_FORMAT``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
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
