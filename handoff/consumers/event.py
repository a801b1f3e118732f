"""The event a handler receives: the decoded envelope, typed, with where it came from.

An optional field the writer left out stays ``None`` and an empty string
stays ``""``: nothing here folds one into the other.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import orjson

from handoff.core.errors import MalformedEvent

# The fields that say what changed. The fingerprint leaves out the schema
# version and fields a newer schema added (completedAt), so the same event
# written by an older and a newer relay has one fingerprint.
FINGERPRINT_FIELDS = (
    "eventId",
    "eventType",
    "tenantId",
    "documentId",
    "runId",
    "version",
    "source",
    "occurredAt",
    "owner",
    "previousOwner",
    "status",
    "data",
)

_REQUIRED_TEXT = ("eventId", "eventType", "source", "tenantId", "documentId", "status")

# Derived event ids: a handler that names its next handoff after the event
# it reacts to mints the same id on every redelivery.
_NAMESPACE = uuid.UUID("6f1d8a52-3c1e-4b0e-9a53-2d0c6f7e8a41")

T = TypeVar("T")
_new = object.__new__


def built(cls: type[T], **fields: Any) -> T:
    """``cls(**fields)`` for a frozen dataclass, without its generated ``__init__``.

    Why: a consumer makes an ``Event`` and a ``Position`` for every message, and a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``,
    a call per field: 2.5 µs for the event's 21 fields against 0.3 µs for one
    update of the instance's ``__dict__`` (measured alone), on a path of about
    30 µs a message at batch 500. The instance is the same (equality, hash,
    repr, ``replace``, frozen after). Every field must be given: no default is
    filled in (tests/unit/test_event_built.py holds each caller to that).
    """
    made = _new(cls)
    made.__dict__.update(fields)
    return made


@dataclass(frozen=True)
class Position:
    """Where a message was read: topic, partition, offset (and its raw parts).

    ``timestamp_ms``: the record's Kafka timestamp (the broker's append time
    on a topic with ``message.timestamp.type=LogAppendTime``, else the
    producer's); ``received_at``: the consumer's clock (epoch seconds) when
    its poll returned the message. Both None where a message was not polled
    (set-aside work taken back, a rehearsal's rows).
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    timestamp_ms: int | None = None
    received_at: float | None = None


@dataclass(frozen=True)
class Event:
    event_id: str
    event_type: str
    schema_version: int
    source: str
    occurred_at: datetime
    tenant_id: str
    document_id: str
    run_id: int
    version: int
    correlation_id: str | None
    causation_id: str | None
    owner: str | None
    previous_owner: str | None
    status: str
    assigned_at: datetime | None
    due_at: datetime | None
    completed: bool
    completed_at: datetime | None
    data: dict[str, Any]
    fingerprint: bytes
    position: Position

    def next_event_id(self, step: str) -> str:
        """A stable event id for the change this event causes (``step`` names it)."""
        return str(uuid.uuid5(_NAMESPACE, f"{self.tenant_id}/{self.event_id}/{step}"))

    def identity(self) -> dict[str, Any]:
        """What the guard and the quarantine record of it."""
        return {
            "eventId": self.event_id,
            "eventType": self.event_type,
            "documentId": self.document_id,
            "runId": self.run_id,
            "version": self.version,
            "fingerprint": self.fingerprint.hex(),
            "topic": self.position.topic,
            "partition": self.position.partition,
            "offset": self.position.offset,
        }


def fingerprint(record: dict[str, Any]) -> bytes:
    chosen = {name: record.get(name) for name in FINGERPRINT_FIELDS}
    return hashlib.sha256(orjson.dumps(chosen, option=orjson.OPT_SORT_KEYS)).digest()


def _text(record: dict[str, Any], name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value:
        raise MalformedEvent(f"envelope field {name} must be a non-empty string, not {value!r}")
    return value


def _positive(record: dict[str, Any], name: str) -> int:
    value = record.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise MalformedEvent(f"envelope field {name} must be an integer >= 1, not {value!r}")
    return value


def from_record(record: dict[str, Any], position: Position) -> Event:
    """Validate a decoded envelope; anything off raises ``MalformedEvent``."""
    for name in _REQUIRED_TEXT:
        _text(record, name)
    try:
        data = orjson.loads(record.get("data") or "{}")
    except orjson.JSONDecodeError as exc:
        raise MalformedEvent(f"envelope field data is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedEvent("envelope field data must be a JSON object")
    if not isinstance(record.get("occurredAt"), datetime):
        raise MalformedEvent("envelope field occurredAt is missing")
    return built(
        Event,
        event_id=record["eventId"],
        event_type=record["eventType"],
        schema_version=int(record.get("schemaVersion") or 0),
        source=record["source"],
        occurred_at=record["occurredAt"],
        tenant_id=record["tenantId"],
        document_id=record["documentId"],
        run_id=_positive(record, "runId"),
        version=_positive(record, "version"),
        correlation_id=record.get("correlationId"),
        causation_id=record.get("causationId"),
        owner=record.get("owner"),
        previous_owner=record.get("previousOwner"),
        status=record["status"],
        assigned_at=record.get("assignedAt"),
        due_at=record.get("dueAt"),
        completed=bool(record.get("completed")),
        completed_at=record.get("completedAt"),
        data=data,
        fingerprint=fingerprint(record),
        position=position,
    )
