"""Kafka and registry plumbing of the relay: producer, topics, schema registration."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from handoff.core.errors import ConfigurationError, Unavailable
from handoff.core.events import EventSchema, retained_versions

log = logging.getLogger("handoff.relay")

COMPATIBILITY = "BACKWARD_TRANSITIVE"


def producer(
    bootstrap: str,
    *,
    linger_ms: int,
    delivery_timeout_s: float,
    error_cb: Callable[[KafkaError], None] | None = None,
    on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    logger: logging.Logger = log,
) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            # Idempotent: retries inside librdkafka neither duplicate nor reorder.
            "enable.idempotence": True,
            # A message that cannot be delivered must not be overtaken by a
            # later one of its partition (the resend would land out of order):
            # librdkafka raises a fatal error instead, and the relay starts a
            # new producer and resends everything unmarked.
            "enable.gapless.guarantee": True,
            # Delivery callbacks for failures only: no Python call per ack.
            "delivery.report.only.error": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            # The Java client's partitioner, so Java and Kafka Connect consumers
            # see the same key -> partition mapping (librdkafka defaults to CRC32).
            "partitioner": "murmur2_random",
            "linger.ms": linger_ms,
            "batch.num.messages": 10_000,
            "compression.type": "lz4",
            # Bounded, so that after flush() every message is delivered or failed.
            "message.timeout.ms": int(delivery_timeout_s * 1000),
            "queue.buffering.max.messages": 200_000,
            "logger": logger,
            **({"error_cb": error_cb} if error_cb else {}),
            # One callback for every message (failures only, see above).
            **({"on_delivery": on_delivery} if on_delivery else {}),
        }
    )


def ensure_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": log})  # type: ignore[dict-item]
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=-1) for t in topics],
        request_timeout=15,
    )
    for topic, future in futures.items():
        try:
            future.result(timeout=20)
        except KafkaException as exc:
            if exc.args and exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
                continue
            raise Unavailable(f"cannot create topic {topic}: {exc}") from exc


def register_schemas(registry_url: str, topics: list[str]) -> tuple[EventSchema, dict[str, int]]:
    """Register every retained version under ``<topic>-value``, oldest first.

    The subject's compatibility is set to BACKWARD_TRANSITIVE before, so the
    registry itself refuses a version that cannot read all earlier ones.
    Returns the current schema and its id per topic.
    """
    versions = retained_versions()
    ids: dict[str, int] = {}
    with SchemaRegistryClient({"url": registry_url, "timeout": 15}) as registry:
        for topic in topics:
            subject = f"{topic}-value"
            try:
                registry.set_compatibility(subject_name=subject, level=COMPATIBILITY)
                for version in versions:
                    ids[topic] = registry.register_schema(subject, Schema(version.text, "AVRO"))
            except SchemaRegistryError as exc:
                if exc.http_status_code >= 500:
                    # The registry's own trouble (e.g. its database restarted
                    # under it): the relay's setup loop waits and tries again.
                    raise Unavailable(f"schema registry error for {subject}: {exc}") from exc
                raise ConfigurationError(
                    f"registry refused the event schema for {subject}: {exc}; "
                    "run make schemas-check"
                ) from exc
            except Exception as exc:  # connection problems surface as various types
                raise Unavailable(f"schema registry at {registry_url}: {exc}") from exc
    return versions[-1], ids


def headers(payload: dict[str, Any]) -> list[Any]:
    """[EventBridge rule / Pipe filter] without decoding the value; ``eventId`` so that a
    consumer or a tool can deduplicate without decoding either."""
    return [
        ("eventId", payload["eventId"].encode()),
        ("eventType", payload["eventType"].encode()),
        ("owner", (payload.get("owner") or "").encode()),
        ("tenant", payload["tenantId"].encode()),
        ("version", str(payload["version"]).encode()),
    ]
