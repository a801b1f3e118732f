"""Requests and receipts of the emit contract, validated at every entry point.

JSON field names are camelCase (the HTTP API); Python names are snake_case.
The database checks the essentials again for callers that use plain SQL.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

MAX_DATA_BYTES = 64 * 1024
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62})$")
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            "must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit"
        )
    return value


def _identifier(value: str) -> str:
    if not _PRINTABLE.match(value):
        raise ValueError("must not contain control characters")
    return value


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.utcoffset() is None:
        raise ValueError("must include a time zone, e.g. 2026-12-01T09:00:00Z")
    return value


def _small_object(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(json.dumps(value, separators=(",", ":"))) > MAX_DATA_BYTES:
        raise ValueError(f"must serialise to at most {MAX_DATA_BYTES} bytes of JSON")
    return value


ServiceName = Annotated[str, AfterValidator(_name)]
Identifier = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_identifier)]
Status = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_identifier)]
EventType = Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_identifier)]
Deadline = Annotated[datetime | None, AfterValidator(_aware)]
Data = Annotated[dict[str, Any] | None, AfterValidator(_small_object)]
# Versions and runs are PostgreSQL integers.
Version = Annotated[int, Field(ge=1, le=2**31 - 1)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class CreateRequest(_Model):
    """Initial assignment of a document to its first owner."""

    event_id: Identifier
    document_id: Identifier
    owner: ServiceName
    status: Status
    event_type: EventType = "created"
    due_at: Deadline = None
    data: Data = None
    correlation_id: Identifier | None = None
    causation_id: Identifier | None = None


class StartRunRequest(_Model):
    """A new run of a finished document (deliberate reprocessing); versions restart at 1."""

    event_id: Identifier
    owner: ServiceName
    status: Status
    event_type: EventType = "run-started"
    due_at: Deadline = None
    data: Data = None
    correlation_id: Identifier | None = None
    causation_id: Identifier | None = None


class HandoffRequest(_Model):
    """Handoff (next owner differs), progress (same owner) or completion (no next owner)."""

    event_id: Identifier
    event_type: EventType
    document_id: Identifier
    sender: ServiceName | None = None
    next_owner: ServiceName | None
    status: Status
    expected_version: Version
    run_id: Version | None = None
    due_at: Deadline = None
    data: Data = None
    correlation_id: Identifier | None = None
    causation_id: Identifier | None = None


class Receipt(_Model):
    """What an accepted change answers; an identical retry answers the same."""

    event_id: str
    document_id: str
    run_id: int
    version: int
    owner: str | None
    status: str
    accepted_at: datetime
    replayed: bool = Field(default=False, exclude=True)
    """True when this is the stored answer to an earlier identical request."""
