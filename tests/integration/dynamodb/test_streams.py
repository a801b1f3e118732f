"""The twin's event side: the DynamoDB table's stream published to real Kafka in the relay's
envelope, key and headers (decoded by the consumers' own decoder), per-document order kept,
and nothing lost when the reader dies between publishing and saving its position."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.event import Event, Position
from handoff.core.models import CreateRequest, HandoffRequest, Receipt
from handoff.core.settings import HandoffSettings
from handoff.dynamo.streams import StreamReader
from handoff.stack.dynamodb import client


class Crash(Exception):
    pass


def _events(settings: HandoffSettings, topic: str, tenant: str) -> list[Event]:
    """Every event of ``tenant`` on ``topic``, decoded as a consumer decodes it."""
    reader = Consumer({"bootstrap.servers": settings.kafka_bootstrap,
                       "group.id": f"t-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                       "enable.partition.eof": True})  # fmt: skip
    decoder = Decoder(settings.schema_registry_url, reader_schema(None))
    reader.subscribe([topic])
    found, ends = [], 0
    try:
        while ends < 6:
            msg = reader.poll(10)
            assert msg is not None, "no message nor end of partition within 10 s"
            problem = msg.error()
            if problem is not None:
                assert problem.code() == KafkaError._PARTITION_EOF, problem
                ends += 1
                continue
            headers = {k: v.decode() for k, v in msg.headers() or []}
            if headers.get("tenant") != tenant:
                continue
            event = decoder.decode(msg.value(), Position(topic, msg.partition() or 0,
                                                         msg.offset() or 0))  # fmt: skip
            assert msg.key() == f"{tenant}/{event.document_id}".encode()
            assert headers["eventType"] == event.event_type and headers["owner"] == (
                event.owner or ""
            )
            assert headers["eventId"] == event.event_id
            found.append(event)
    finally:
        reader.close()
        decoder.close()
    return found


@pytest.fixture
def changes(dynamo_store: Any) -> tuple[str, int]:
    """Three documents of a fresh tenant moved on a few times in the DynamoDB store."""
    tenant = f"s-{uuid.uuid4().hex[:8]}"
    maker = dynamo_store.add_service(tenant, "maker", can_create=True)
    worker = dynamo_store.add_service(tenant, "worker")
    dynamo_store.add_service(tenant, "next")
    count = 0
    for i in range(3):
        doc = f"d{i}"
        made = dynamo_store.send(maker, CreateRequest(event_id=f"{doc}-c", document_id=doc,
                                                      owner="worker", status="new",
                                                      data={"i": i}))  # fmt: skip
        assert isinstance(made, Receipt)
        count += 1
        for version in range(1, 3):
            step = HandoffRequest(event_id=f"{doc}-{version}", event_type="progress",
                                  document_id=doc, next_owner="worker", status=f"step {version}",
                                  expected_version=version)  # fmt: skip
            moved = dynamo_store.send(worker, step)
            assert isinstance(moved, Receipt)
            count += 1
    return tenant, count


def test_each_change_reaches_kafka_in_the_relays_envelope_and_order(
    changes: tuple[str, int], dynamo_url: str, dynamo_store: Any, migrated: HandoffSettings
) -> None:
    tenant, count = changes
    topic = f"test.twin.{uuid.uuid4().hex[:8]}"
    reader = StreamReader(migrated, client(dynamo_url), client(dynamo_url, "dynamodbstreams"),
                          table=dynamo_store.table, topic=topic)  # fmt: skip
    assert reader.run_once() >= count
    events = _events(migrated, topic, tenant)
    assert len(events) == count
    for doc in ("d0", "d1", "d2"):
        versions = [e.version for e in events if e.document_id == doc]
        assert versions == [1, 2, 3]  # one partition per document, in order
    last = next(e for e in events if (e.document_id, e.version) == ("d1", 3))
    assert (last.owner, last.previous_owner, last.status, last.data) == (
        "worker", "worker", "step 2", {"i": 1})  # fmt: skip
    assert reader.run_once() == 0  # its position was saved: nothing again


def test_a_reader_killed_before_saving_its_position_loses_nothing(
    changes: tuple[str, int], dynamo_url: str, dynamo_store: Any, migrated: HandoffSettings
) -> None:
    tenant, count = changes
    topic = f"test.twin.{uuid.uuid4().hex[:8]}"

    def crash() -> None:
        raise Crash

    first = StreamReader(migrated, client(dynamo_url), client(dynamo_url, "dynamodbstreams"),
                         table=dynamo_store.table, topic=topic)  # fmt: skip
    with pytest.raises(Crash):
        first.run_once(after_flush=crash)  # published, position not saved
    again = StreamReader(migrated, client(dynamo_url), client(dynamo_url, "dynamodbstreams"),
                         table=dynamo_store.table, topic=topic)  # fmt: skip
    again.run_once()
    events = _events(migrated, topic, tenant)
    ids = {e.event_id for e in events}
    assert len(ids) == count  # every change, at least once (repeats are the guard's job)
