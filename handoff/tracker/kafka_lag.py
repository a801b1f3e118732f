"""Consumer lag from Kafka, for the operate page: how many events each of a
tenant's consumer groups has not yet taken, per group, summed over its
partitions (end offset minus committed offset).

A consumer's group is ``handoff.<tenant>.<service>`` unless it was given
another (HANDOFF_CONSUMER_GROUP); only the default names are looked up here.
Blocking calls with a deadline: run it in a thread.
"""

from __future__ import annotations

import threading
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


_admins: dict[str, AdminClient] = {}
_admins_lock = threading.Lock()


def _admin(bootstrap: str, timeout_s: float) -> AdminClient:
    """One admin client per cluster for the process: making one costs a connection and
    a metadata round trip (~50 ms, measured), more than the lookups themselves."""
    with _admins_lock:
        if bootstrap not in _admins:
            _admins[bootstrap] = AdminClient(
                {
                    "bootstrap.servers": bootstrap,
                    "socket.timeout.ms": int(timeout_s * 1000),
                }
            )
        return _admins[bootstrap]


def consumer_lag(
    bootstrap: str, tenant: str, consumers: Iterable[str], timeout_s: float = 3.0
) -> list[GroupLag]:
    """Lag of each consumer's group; KafkaException when the cluster does not answer."""
    admin = _admin(bootstrap, timeout_s)
    # Every group's request at once, then the answers: one round trip's wait, not one each.
    asked = {
        # One group per request: the call accepts a list but serves only one group.
        consumer: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_of(tenant, consumer))], request_timeout=timeout_s
        )[group_of(tenant, consumer)]
        for consumer in consumers
    }
    committed: dict[str, list[TopicPartition]] = {}
    for consumer, future in asked.items():
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
