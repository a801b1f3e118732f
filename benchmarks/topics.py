"""The topics a benchmark makes, and their deletion when it is done."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from handoff.core.settings import HandoffSettings


def make(settings: HandoffSettings, topic: str, log_append_time: bool = False) -> None:
    """Six partitions, one replica; ``log_append_time``: the broker stamps each record
    with its append time, the end of a latency."""
    config = {"message.timestamp.type": "LogAppendTime"} if log_append_time else {}
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=6, replication_factor=1, config=config)]
    ).values():
        future.result(30)


def delete(settings: HandoffSettings, topics: Iterable[str]) -> None:
    """Delete ``topics``; one that is gone already is no error."""
    names = list(topics)
    if not names:
        return
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    for future in admin.delete_topics(names, operation_timeout=30).values():
        with contextlib.suppress(KafkaException):
            future.result(60)
