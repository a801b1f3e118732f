"""Decoding through the real registry: reader schemas, absent versus empty, bad bytes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.event import Position
from handoff.core import HandoffClient
from handoff.core.errors import ConfigurationError, MalformedEvent
from handoff.core.identity import Credential
from tests.fix_consumer import Wire, payloads


@pytest.fixture
def decoders(wire: Wire) -> Iterator[Callable[[int | None], Decoder]]:
    opened: list[Decoder] = []

    def make(version: int | None) -> Decoder:
        decoder = Decoder(wire.settings.schema_registry_url, reader_schema(version))
        opened.append(decoder)
        return decoder

    yield make
    for decoder in opened:
        decoder.close()


@pytest.fixture
def finished(
    service: Callable[..., Credential], admin: psycopg.Connection[Any], tenant: str
) -> dict[str, Any]:
    """The completion event of a document: v2 has completedAt, v1 does not know it."""
    creator = service("creator", can_create=True)
    with HandoffClient.direct(creator) as c:
        c.create(event_id="f-1", document_id="f", owner="creator", status="new", data={"memo": ""})
        c.emit(
            event_id="f-2",
            event_type="done",
            document_id="f",
            next_owner=None,
            status="done",
            expected_version=1,
        )
    return dict(payloads(admin, tenant)["f", 1, 2])


def _at(value: bytes) -> Position:
    return Position("t", 0, 0, None, value, {})


def test_a_v1_reader_reads_v2_events_and_the_v2_reader_sees_the_new_field(
    wire: Wire, decoders: Callable[[int | None], Decoder], finished: dict[str, Any]
) -> None:
    value = wire.encode(finished)
    assert wire.schema.version == 2  # written with the newest schema
    old = decoders(1).decode(value, _at(value))
    new = decoders(2).decode(value, _at(value))
    assert new.completed and new.completed_at is not None
    assert old.completed and old.completed_at is None  # v1 has no such field
    assert (old.event_id, old.version, old.owner, old.status) == ("f-2", 2, None, "done")
    assert old.fingerprint == new.fingerprint  # one event, whichever reader


def test_an_absent_optional_field_and_an_empty_string_stay_different(
    wire: Wire, decoders: Callable[[int | None], Decoder], finished: dict[str, Any]
) -> None:
    decoder = decoders(None)
    absent = {**finished, "causationId": None, "data": {}}
    empty = {**finished, "eventId": "f-2e", "causationId": "", "data": {"memo": ""}}
    a = decoder.decode(wire.encode(absent), _at(b""))
    e = decoder.decode(wire.encode(empty), _at(b""))
    assert a.causation_id is None and e.causation_id == ""
    assert "memo" not in a.data and e.data["memo"] == ""
    assert a.fingerprint != e.fingerprint


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"", "wire format"),
        (b"\x01\x00\x00\x00\x01abc", "wire format"),
        (b"\x00\x7f\xff\xff\xf0abc", "unknown to the registry"),
    ],
)
def test_bytes_that_are_not_an_event_are_classified_malformed(
    wire: Wire, decoders: Callable[[int | None], Decoder], value: bytes, problem: str
) -> None:
    with pytest.raises(MalformedEvent, match=problem):
        decoders(None).decode(value, _at(value))


def test_a_body_that_does_not_fit_its_schema_or_an_envelope_that_fails_are_malformed(
    wire: Wire, decoders: Callable[[int | None], Decoder], finished: dict[str, Any]
) -> None:
    good = wire.encode(finished)
    with pytest.raises(MalformedEvent, match="does not fit"):
        decoders(None).decode(good[:12], _at(good[:12]))
    for broken in ({"eventId": ""}, {"version": 0}, {"data": ["not", "an", "object"]}):
        value = wire.encode({**finished, **broken})
        with pytest.raises(MalformedEvent, match="envelope field"):
            decoders(None).decode(value, _at(value))


def test_an_unknown_reader_schema_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="no reader schema v99"):
        reader_schema(99)
