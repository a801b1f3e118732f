"""Kafka and the schema registry are real: an Avro record makes the round trip."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from handoff.core.settings import HandoffSettings

SCHEMA = """
{"type": "record", "name": "Probe", "namespace": "dev.handoff.test",
 "fields": [{"name": "id", "type": "string"},
            {"name": "count", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": null}]}
"""


def test_avro_round_trip_through_registry(settings: HandoffSettings) -> None:
    with SchemaRegistryClient({"url": settings.schema_registry_url, "timeout": 10}) as registry:
        _round_trip(registry, settings)


def _round_trip(registry: SchemaRegistryClient, settings: HandoffSettings) -> None:
    topic = f"test.avro.{uuid.uuid4().hex[:8]}"
    # Topic-name strategy: the client's default looks up "associations", an API
    # Apicurio may never answer.
    strategy = {"subject.name.strategy": topic_subject_name_strategy}
    serializer = AvroSerializer(registry, SCHEMA, conf=strategy)
    deserializer = AvroDeserializer(registry, conf=strategy)
    records = [{"id": f"doc-{i}", "count": i, "note": None if i % 2 else "even"} for i in range(5)]

    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
    for record in records:
        value = serializer(record, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, key=record["id"].encode(), value=value)
    assert producer.flush(30) == 0

    # Confluent wire format: magic byte 0, then the registry's 4-byte schema id.
    latest = registry.get_latest_version(f"{topic}-value")
    assert value[0] == 0 and int.from_bytes(value[1:5], "big") == latest.schema_id

    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(records) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            got.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    assert sorted(got, key=lambda r: r["count"]) == records
