"""Consumer lag from Kafka, for the operate page: how many events each of a
tenant's consumer groups has not yet taken, per group, summed over its
partitions (end offset minus committed offset).

A consumer's group is ``handoff.<tenant>.<service>`` unless it was given
another (HANDOFF_CONSUMER_GROUP); only the default names are looked up here.
Blocking calls with a deadline: run it in a thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]


@dataclass(frozen=True)
class GroupLag:
    consumer: str
    group: str
    lag: int | None  # None: the group has committed nothing (never ran, or is new)
    partitions: int


def group_of(tenant: str, consumer: str) -> str:
    return f"handoff.{tenant}.{consumer}"


def consumer_lag(
    bootstrap: str, tenant: str, consumers: Iterable[str], timeout_s: float = 3.0
) -> list[GroupLag]:
    """Lag of each consumer's group; KafkaException when the cluster does not answer."""
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout_s * 1000)}
    )
    committed: dict[str, list[TopicPartition]] = {}
    for consumer in consumers:
        group = group_of(tenant, consumer)
        # One group per request: the call accepts a list but serves only one group.
        future = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
        )[group]
        found = future.result(timeout=timeout_s).topic_partitions or []
        committed[consumer] = [tp for tp in found if tp.offset >= 0]
    wanted = {TopicPartition(tp.topic, tp.partition) for tps in committed.values() for tp in tps}
    ends: dict[tuple[str, int], int] = {}
    if wanted:
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        answers = admin.list_offsets({tp: latest for tp in wanted}, request_timeout=timeout_s)
        for tp, future in answers.items():
            ends[(tp.topic, tp.partition)] = future.result(timeout=timeout_s).offset
    lags = []
    for consumer, tps in committed.items():
        lag = sum(max(0, ends[(tp.topic, tp.partition)] - tp.offset) for tp in tps) if tps else None
        lags.append(GroupLag(consumer, group_of(tenant, consumer), lag, len(tps)))
    return lags


__all__ = ["GroupLag", "KafkaException", "consumer_lag", "group_of"]
