"""Consumer settings (``HANDOFF_CONSUMER_*``), with defaults and validation."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from handoff.core.retry import RetryPolicy


class ConsumerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HANDOFF_CONSUMER_", extra="ignore")

    topics: Annotated[
        list[str],
        Field(description='Topics to read (JSON list); the relay\'s default is "handoff.events".'),
    ] = ["handoff.events"]
    group: Annotated[
        str | None,
        Field(description="Kafka consumer group; default handoff.<tenant>.<consumer>."),
    ] = None
    batch_size: Annotated[
        int,
        Field(
            ge=1,
            le=10_000,
            description="Events per database transaction. 1 for non-idempotent effects "
            "[Lambda batch size 1]; larger for cheap idempotent ones.",
        ),
    ] = 100
    concurrency: Annotated[
        int,
        Field(
            ge=1,
            le=64,
            description="Units in flight at once in one process, each on a database "
            "connection of its own [Lambda ParallelizationFactor]. A document's events "
            "always go to the same one, in order; other documents' events overlap, so the "
            "process works while a unit waits for the database (or a handler for a "
            "provider). Offsets are then stored once a whole poll is done.",
        ),
    ] = 1
    queue_ahead: Annotated[
        int,
        Field(
            ge=0,
            le=16,
            description="In each lane: units (an event at batch 1, else a batch) sent ahead, "
            "queued behind the one the database is on, each still its own transaction, so "
            "that the database goes from one commit straight to the next unit while the "
            "consumer makes the one after (batch 1: about twice the events/s of one at a "
            "time, measured). A document's events are never sent ahead of each other. 0: "
            "each unit is sent when the one before it has committed. Handlers that read in "
            "their unit always go one unit at a time.",
        ),
    ] = 1
    max_deliveries: Annotated[
        int,
        Field(ge=1, le=100, description="Failed attempts before quarantine [SQS maxReceiveCount]."),
    ] = 3
    retry_budget_s: Annotated[
        float, Field(gt=0, description="Time one event may spend in retries before quarantine.")
    ] = 30.0
    retry_base_s: Annotated[float, Field(ge=0, description="First backoff step.")] = 0.2
    retry_max_s: Annotated[float, Field(ge=0, description="Longest single backoff wait.")] = 5.0
    gap_wait_s: Annotated[
        float,
        Field(
            ge=0,
            description="How long an event waits for an earlier version before the consumer "
            "reconciles from the database's state.",
        ),
    ] = 10.0
    sweep_interval_s: Annotated[
        float, Field(gt=0, description="How often parked and retried events are looked at.")
    ] = 1.0
    poll_timeout_s: Annotated[float, Field(gt=0, description="Longest wait for messages.")] = 0.5
    prefetch: Annotated[
        int,
        Field(
            ge=1,
            le=10_000,
            description="Messages taken from Kafka at once (at least a batch; batched in one "
            "lane and with units that quick, four batches, so that one is decoded while "
            "another's unit runs), then handled batch by batch: at batch 1 a poll per event "
            "would cost more than the event. Keep prefetch x the slowest event under "
            "Kafka's max.poll.interval.ms (300 s).",
        ),
    ] = 200
    metrics_interval_s: Annotated[
        float, Field(gt=0, description="How often lag and pending work are measured.")
    ] = 5.0
    session_timeout_s: Annotated[
        float,
        Field(
            ge=6,
            le=1800,
            description="Kafka group session timeout: how long a crashed process keeps its "
            "partitions before the group gives them to another (the broker allows 6 s and up). "
            "Heartbeats come from librdkafka's own thread, not from the poll loop, so a slow "
            "handler does not end a session; 10 s (Kafka's own default is 45) lets a killed "
            "process's partitions move on soon. With INSTANCE_ID, set it longer than a restart.",
        ),
    ] = 10.0
    instance_id: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            pattern=r"^[A-Za-z0-9._-]+$",
            description="Static membership (Kafka group.instance.id), unique per process of "
            "the group, stable across its restarts: a process that comes back within the "
            "session timeout keeps its partitions without a rebalance. The cost: one that does "
            "not come back holds them for the whole session timeout. Unset: dynamic membership.",
        ),
    ] = None
    commit_interval_s: Annotated[
        float,
        Field(
            gt=0,
            le=60,
            description="How often offsets stored after database commits are committed to "
            "Kafka (and on shutdown). Longer means more redelivered, guard-absorbed events "
            "after a crash, never a lost one.",
        ),
    ] = 1.0
    reader_schema_version: Annotated[
        int | None,
        Field(ge=1, description="Read events as this schema version (default: the newest)."),
    ] = None

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            attempts=self.max_deliveries,
            base_s=self.retry_base_s,
            max_s=self.retry_max_s,
            budget_s=self.retry_budget_s,
        )


class EffectSettings(BaseSettings):
    """The executors' operating contract (``HANDOFF_EFFECTS_*``), documented in the README."""

    model_config = SettingsConfigDict(env_prefix="HANDOFF_EFFECTS_", extra="ignore")

    executors: Annotated[
        int, Field(ge=0, le=256, description="Executor workers per process (0: none).")
    ] = 1
    lease_s: Annotated[
        float,
        Field(
            gt=0,
            le=3600,
            description="How long a claim lasts [SQS visibility timeout]: longer than the "
            "provider timeout; a killed executor's claims are taken over after it.",
        ),
    ] = 30.0
    timeout_s: Annotated[
        float, Field(gt=0, le=600, description="Longest wait for a provider's answer.")
    ] = 10.0
    max_attempts: Annotated[
        int,
        Field(
            ge=1,
            le=100,
            description="Submissions that reach no final answer before the intent is handed "
            "to a person (unresolved).",
        ),
    ] = 5
    max_lookups: Annotated[
        int,
        Field(
            ge=1,
            le=100,
            description="Failed status lookups of an unknown outcome before the intent is "
            "handed to a person (unresolved).",
        ),
    ] = 5
    retry_base_s: Annotated[float, Field(ge=0, description="First backoff step.")] = 0.5
    retry_max_s: Annotated[float, Field(ge=0, description="Longest backoff wait.")] = 30.0
    poll_s: Annotated[
        float,
        Field(gt=0, le=60, description="Longest idle wait (new intents also wake executors)."),
    ] = 1.0

    claim_ahead: Annotated[
        int | None,
        Field(
            ge=0,
            le=256,
            description="Intents a process's executors claim beyond those waiting, so that "
            "one claim serves several effects (default: a quarter of the executors).",
        ),
    ] = None

    def ahead(self, executors: int) -> int:
        """How many intents the executors of a process claim ahead (claims.py)."""
        return executors // 4 if self.claim_ahead is None else self.claim_ahead

    @classmethod
    def with_executors(cls, executors: int | None) -> EffectSettings:
        """The settings from the environment, with ``executors`` when given."""
        return cls() if executors is None else cls(executors=executors)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            attempts=self.max_attempts,
            base_s=self.retry_base_s,
            max_s=self.retry_max_s,
            budget_s=3600.0,
        )
