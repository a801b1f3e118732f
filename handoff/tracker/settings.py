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
    lag_interval_s: Annotated[
        float,
        Field(
            ge=0,
            le=3600,
            description="How often a child process of the server samples each consumer "
            "group's lag in Kafka for the operate page; 0 turns sampling off.",
        ),
    ] = 10.0
    lag_timeout_s: Annotated[
        float,
        Field(gt=0, le=120, description="How long one lag sample may wait for Kafka."),
    ] = 5.0
    refresh_s: Annotated[
        float, Field(ge=1, le=3600, description="How often the overview page refreshes itself.")
    ] = 5.0
    secure_cookie: Annotated[
        bool | None,
        Field(
            description="Mark the UI's session cookie Secure: true always, false never; unset "
            "(the default): when the request came over HTTPS, directly or through a proxy "
            "in forwarded_allow_ips that says so with X-Forwarded-Proto."
        ),
    ] = None
    session_lifetime_s: Annotated[
        float,
        Field(
            ge=60,
            le=30 * 24 * 3600,
            description="How long a web UI session lasts at most after sign-in.",
        ),
    ] = 12 * 3600.0
    session_idle_s: Annotated[
        float,
        Field(
            ge=60,
            le=30 * 24 * 3600,
            description="A web UI session unused this long ends (an open overview page "
            "refreshes itself, and so keeps its session).",
        ),
    ] = 3600.0
    metrics_token: Annotated[
        str | None,
        Field(
            min_length=16,
            description="When set, /metrics answers only requests with 'Authorization: "
            "Bearer <this>'. Unset (the default), it is open, as Prometheus scrapes "
            "expect: it carries counts and latencies, no documents or credentials.",
        ),
    ] = None
    forwarded_allow_ips: Annotated[
        str,
        Field(
            description="Proxies whose X-Forwarded-Proto and X-Forwarded-For are believed "
            "(comma-separated addresses or networks, * for any)."
        ),
    ] = "127.0.0.1"
    max_json_bytes: Annotated[
        int,
        Field(
            ge=1024,
            le=64 * 1024 * 1024,
            description="Largest request body of the JSON API; more is answered 413 before "
            "it is read (an emit's data is at most 64 KiB).",
        ),
    ] = 1024 * 1024
    max_form_bytes: Annotated[
        int,
        Field(
            ge=1024,
            le=16 * 1024 * 1024,
            description="Largest form the web UI accepts (sign-in, hand-on, operate); more "
            "is answered 413 before it is read.",
        ),
    ] = 64 * 1024
    max_header_bytes: Annotated[
        int,
        Field(
            ge=1024,
            le=1024 * 1024,
            description="Largest request line and headers; more is answered 431. The "
            "default holds the longest query the API takes (a 2,000-character Find filter, "
            "percent-encoded).",
        ),
    ] = 64 * 1024
    header_timeout_s: Annotated[
        float,
        Field(
            gt=0,
            le=300,
            description="Time a client has to send a request's line and headers once it "
            "began (or once it connected); then 408 and the connection is closed.",
        ),
    ] = 10.0
