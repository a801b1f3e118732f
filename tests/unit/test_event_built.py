"""Events and positions made without the frozen dataclass's __init__ (event.built).

The consumer's hot path makes both with ``built``; these check that what it
makes is the instance the constructor makes, with every field set.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message

from handoff.consumers import Consumer, Event
from handoff.consumers.event import Position, built, from_record
from handoff.consumers.runtime import screen

RECORD = {
    "eventId": "e-1", "eventType": "created", "schemaVersion": 2, "source": "test",
    "occurredAt": datetime(2026, 12, 5, 12, 0, tzinfo=UTC), "tenantId": "t1",
    "documentId": "invoice-42", "runId": 1, "version": 3, "correlationId": None,
    "causationId": "c-1", "owner": "review", "previousOwner": "intake", "status": "new",
    "assignedAt": None, "dueAt": None, "completed": False, "data": '{"amount": 1}',
    "completedAt": None,
}  # fmt: skip


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_an_event_from_a_record_is_the_constructors_event_with_every_field_set() -> None:
    position = Position("t", 0, 7)
    event = from_record(dict(RECORD), position)
    assert set(vars(event)) == _names(Event)
    same = Event(**{name: getattr(event, name) for name in _names(Event)})
    assert event == same
    assert repr(event) == repr(same)
    assert event.data == {"amount": 1} and event.position is position
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.version = 4  # type: ignore[misc]
    assert dataclasses.replace(event, version=4).version == 4


def test_a_screened_message_is_the_constructors_position_with_every_field_set() -> None:
    app = Consumer("review")
    app.handler("created")(lambda event, tx: None)
    msg = Message(
        topic="handoff.events", partition=2, offset=9, key=b"invoice-42", value=b"\x00body",
        headers=[("eventType", b"created"), ("tenant", b"t1"), ("owner", b"review")],
        timestamp=(TIMESTAMP_LOG_APPEND_TIME, 1_700_000_000_000),
    )  # fmt: skip
    position = screen(msg, app, "t1", received_at=12.5)
    assert position is not None
    assert set(vars(position)) == _names(Position)
    assert position == Position(
        "handoff.events", 2, 9, b"invoice-42", b"\x00body",
        {"eventType": "created", "tenant": "t1", "owner": "review"}, 1_700_000_000_000, 12.5,
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        position.offset = 10  # type: ignore[misc]
    assert screen(msg, app, "another-tenant") is None


def test_built_sets_only_what_it_is_given() -> None:
    # No default is filled in: a caller that leaves a field out gets no such attribute.
    partial = built(Position, topic="t", partition=0, offset=1)
    with pytest.raises(AttributeError):
        _ = partial.headers
