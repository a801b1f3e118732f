"""Settings of the tracker process (``HANDOFF_TRACKER_*``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class TrackerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HANDOFF_TRACKER_", extra="ignore")

    fold_interval_s: Annotated[
        float,
        Field(
            gt=0,
            le=3600,
            description="How often past deadline hours are folded into one row per owner "
            "(keeps the overdue counts O(owners)).",
        ),
    ] = 60.0
    flow_interval_s: Annotated[
        float,
        Field(
            gt=0,
            le=600,
            description="How often new handoffs are folded into the flow counts (pipeline "
            "pace, charts); waiting work is sampled once a minute.",
        ),
    ] = 5.0
    refresh_s: Annotated[
        float, Field(ge=1, le=3600, description="How often the overview page refreshes itself.")
    ] = 5.0
    secure_cookie: Annotated[
        bool,
        Field(description="Mark the UI's sign-in cookie Secure (set when served over HTTPS)."),
    ] = False
