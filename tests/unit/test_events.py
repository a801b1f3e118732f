"""The event contract without a broker: schemas, evolution, encoding, routing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from handoff.core.errors import EventEncodingError
from handoff.core.events import (
    EventSchema,
    decode,
    encode,
    retained_versions,
    to_record,
)
from handoff.core.schema_compat import problems
from handoff.relay.settings import RelaySettings, Route

PAYLOAD = {
    "eventId": "e1",
    "eventType": "approved",
    "schemaVersion": 1,
    "source": "review",
    "occurredAt": "2026-11-29T10:00:00.123456+00:00",
    "tenantId": "t",
    "documentId": "invoice-42",
    "runId": 1,
    "version": 8,
    "correlationId": None,
    "causationId": None,
    "owner": "finalization",
    "previousOwner": "review",
    "status": "approved",
    "assignedAt": "2026-11-29T10:00:00.123456+00:00",
    "dueAt": None,
    "completed": False,
    "completedAt": None,
    "data": {"amount": 12.5},
}


def test_event_written_with_v1_is_read_with_the_current_schema() -> None:
    v1, *_, current = retained_versions()
    assert current.version > v1.version
    old = {k: v for k, v in to_record(PAYLOAD, 1).items() if k != "completedAt"}
    event = decode(encode(v1, 11, old), writer=v1, reader=current)
    assert event["documentId"] == "invoice-42" and event["completedAt"] is None
    assert json.loads(event["data"]) == {"amount": 12.5}


def test_current_schema_round_trip_keeps_timestamps_to_the_microsecond() -> None:
    current = retained_versions()[-1]
    value = encode(current, 7, to_record(PAYLOAD, current.version))
    assert value[:5] == b"\x00\x00\x00\x00\x07"
    event = decode(value, current)
    assert event["occurredAt"].isoformat() == "2026-11-29T10:00:00.123456+00:00"
    assert event["schemaVersion"] == current.version


def test_a_payload_missing_a_required_field_cannot_be_encoded() -> None:
    current = retained_versions()[-1]
    broken = {k: v for k, v in PAYLOAD.items() if k != "status"}
    with pytest.raises(EventEncodingError, match="status"):
        encode(current, 1, to_record(broken, current.version))
    with pytest.raises(EventEncodingError):
        to_record({**PAYLOAD, "occurredAt": "not a time"}, 2)
    with pytest.raises(EventEncodingError, match="wire format"):
        decode(b"\x01abc", current)


def test_the_retained_schemas_are_backward_transitive() -> None:
    assert problems(retained_versions()) == []


def test_a_new_required_field_is_caught(tmp_path: Path) -> None:
    versions = retained_versions()
    latest = json.loads(versions[-1].text)
    latest["fields"].append({"name": "priority", "type": "int"})  # no default
    bad = EventSchema(versions[-1].version + 1, json.dumps(latest))
    found = problems([*versions, bad])
    written_with = {p.split("written with ")[1].split(":")[0] for p in found}
    assert written_with == {f"v{v.version}" for v in versions}  # every older version reported


def test_routes_pick_the_first_match_else_the_default() -> None:
    settings = RelaySettings(
        default_topic="all",
        routes=[
            Route(topic="approvals", event_type="approved"),
            Route(topic="finance", owner="finalization"),
        ],
    )
    assert settings.topic_for("approved", "finalization") == "approvals"
    assert settings.topic_for("handed", "finalization") == "finance"
    assert settings.topic_for("handed", "review") == "all"
    assert settings.topics() == ["all", "approvals", "finance"]


def test_bad_routes_are_refused() -> None:
    with pytest.raises(ValidationError, match="needs event_type and/or owner"):
        Route(topic="x")
    with pytest.raises(ValidationError):
        Route(topic="bad topic!", event_type="x")
