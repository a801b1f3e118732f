"""Relay settings (``HANDOFF_RELAY_*``), with defaults and validation."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Route(BaseModel):
    """Send matching events to ``topic`` [EventBridge rule]. Unset criteria match all."""

    topic: Annotated[str, Field(min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")]
    event_type: str | None = None
    owner: str | None = None

    @model_validator(mode="after")
    def _some_criterion(self) -> Route:
        if self.event_type is None and self.owner is None:
            raise ValueError("a route needs event_type and/or owner; use default_topic for all")
        return self


class RelaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HANDOFF_RELAY_", extra="ignore")

    default_topic: Annotated[
        str, Field(pattern=r"^[A-Za-z0-9._-]+$", description="Topic of events no route matches.")
    ] = "handoff.events"
    routes: Annotated[
        list[Route],
        Field(description='JSON list, first match wins: [{"event_type": "approved", "topic": …}]'),
    ] = []
    batch_size: Annotated[int, Field(ge=1, le=50_000, description="Rows per fetch.")] = 2000
    poll_interval_s: Annotated[
        float, Field(gt=0, description="Longest wait between looks when no NOTIFY comes.")
    ] = 1.0
    rebalance_interval_s: Annotated[
        float, Field(gt=0, description="How often slots are re-divided among relays.")
    ] = 2.0
    retention_hours: Annotated[
        float,
        Field(
            gt=0,
            description="Published outbox rows are purged after this window, and never "
            "before the retention table's outbox window (handoff retention).",
        ),
    ] = 24.0
    purge_interval_s: Annotated[float, Field(gt=0, description="How often to purge.")] = 60.0
    metrics_interval_s: Annotated[
        float, Field(gt=0, description="How often backlog and oldest age are measured.")
    ] = 5.0
    delivery_timeout_s: Annotated[
        float, Field(gt=0, description="Kafka delivery timeout before a batch is retried.")
    ] = 30.0
    max_backoff_s: Annotated[
        float, Field(gt=0, description="Cap of the retry backoff while Kafka is unreachable.")
    ] = 10.0
    topic_partitions: Annotated[
        int, Field(ge=1, description="Partitions of topics the relay creates.")
    ] = 6
    linger_ms: Annotated[int, Field(ge=0, description="Producer batching delay.")] = 5
    trace_timing: Annotated[
        bool,
        Field(
            description="Add relayFetchedAt and relayProducedAt headers (epoch microseconds) "
            "to each event, for a latency breakdown."
        ),
    ] = False

    def topic_for(self, event_type: str, owner: str | None) -> str:
        for route in self.routes:
            if (route.event_type in (None, event_type)) and (route.owner in (None, owner)):
                return route.topic
        return self.default_topic

    def topics(self) -> list[str]:
        return sorted({self.default_topic, *(r.topic for r in self.routes)})
