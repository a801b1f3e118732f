"""A replay manifest: what a replay may do, written down before it runs.

The playbook's list (section 11): source positions or event ids, tenant
scope, failure class, handler revision, expected effect, excluded records,
duplicate-guard policy, allowed external capabilities, rate, stop condition,
reconciliation owner. It names positions and ids, never payloads. Its
revision is a hash of its canonical JSON: approving a revision approves
exactly that scope, and any change makes a new one.

Time ranges and event ids are resolved to Kafka positions when the plan is
made, so the revision covers a fixed input set even while the topic grows.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated, Literal

import orjson
from confluent_kafka import TopicPartition
from pydantic import BaseModel, ConfigDict, Field, model_validator

from handoff.core.errors import InvalidRequest
from handoff.core.kafka import reader


class Range(BaseModel):
    """Offsets ``start``..``end`` (both included) of one partition."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: Annotated[int, Field(ge=0)]
    start: Annotated[int, Field(ge=0)]
    end: Annotated[int, Field(ge=-1)]  # start - 1: an empty range

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.end < self.start - 1:
            raise ValueError(f"partition {self.partition}: end {self.end} before start")
        return self

    @property
    def size(self) -> int:
        return self.end - self.start + 1


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str
    consumer: str
    topic: str
    ranges: Annotated[list[Range], Field(min_length=1)]
    since: datetime | None = None  # as asked, for the record (ranges are what counts)
    until: datetime | None = None
    event_ids: list[str] | None = Field(None, description="only these; None: every record")
    excluded: list[str] = Field(default_factory=list)
    failure_class: str
    handler_revision: dict[str, str] = Field(description="event type -> handler version")
    expected_effect: str
    # The consumer's duplicate guard decides, always: a replayed event it has
    # taken is suppressed. No policy that bypasses it is offered.
    duplicate_guard: Literal["respect"] = "respect"
    allowed_capabilities: list[str] = Field(default_factory=list)
    rate: Annotated[float, Field(gt=0, le=10_000)] = 50.0
    stop_when_quarantined: Annotated[int | None, Field(ge=1)] = None
    stop_when_unresolved: Annotated[int | None, Field(ge=1)] = None
    reconciliation_owner: Annotated[str, Field(min_length=1)]

    @property
    def revision(self) -> str:
        canonical = orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()[:16]

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)


def parse_range(text: str) -> tuple[int, int, int | None]:
    """'P:START-END' or 'P:START-' (to the end of the partition now)."""
    try:
        partition, _, span = text.partition(":")
        start, _, end = span.partition("-")
        return int(partition), int(start), int(end) if end else None
    except ValueError as exc:
        raise InvalidRequest(
            f"--range {text!r}: write PARTITION:START-END, e.g. 0:100-250"
        ) from exc


class Positions:
    """Kafka positions of a topic, to resolve a plan's input set."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self._kafka = reader(bootstrap, "handoff-replay-plan")

    def __enter__(self) -> Positions:
        return self

    def __exit__(self, *_: object) -> None:
        self._kafka.close()

    def partitions(self) -> list[int]:
        found = self._kafka.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            raise InvalidRequest(f"topic {self.topic!r} does not exist or has no partitions")
        return sorted(found.partitions)

    def end(self, partition: int) -> int:
        """The offset the next message of ``partition`` will get."""
        _, high = self._kafka.get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=10
        )
        return int(high)

    def at(self, when: datetime | None, partition: int) -> int:
        """The first offset at or after ``when`` (the end when there is none)."""
        if when is None:
            return self.end(partition)
        millis = int(when.astimezone(UTC).timestamp() * 1000)
        (found,) = self._kafka.offsets_for_times(
            [TopicPartition(self.topic, partition, millis)], timeout=10
        )
        return self.end(partition) if found.offset < 0 else int(found.offset)

    def explicit(self, given: list[tuple[int, int, int | None]]) -> list[Range]:
        known = set(self.partitions())
        ranges = []
        for partition, start, end in given:
            if partition not in known:
                raise InvalidRequest(f"--range: topic {self.topic} has no partition {partition}")
            last = self.end(partition) - 1 if end is None else end
            ranges.append(Range(partition=partition, start=start, end=max(last, start - 1)))
        return ranges

    def between(self, since: datetime | None, until: datetime | None) -> list[Range]:
        ranges = []
        for partition in self.partitions():
            start = 0 if since is None else self.at(since, partition)
            stop = self.at(until, partition)  # the first offset not wanted
            ranges.append(Range(partition=partition, start=start, end=max(stop - 1, start - 1)))
        return ranges
