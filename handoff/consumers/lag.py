"""Consumer lag from Kafka: how many events each consumer group has not yet
taken, summed over its partitions (end offset minus committed offset); for
the tracker's lag sampler and ``handoff backlog``.

A consumer's group is ``handoff.<tenant>.<service>`` unless it was given
another (HANDOFF_CONSUMER_GROUP); only the default names are looked up here.
Blocking calls with a deadline: run it in a thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from handoff.core.errors import KafkaUnavailable
from handoff.core.isolated import call_isolated


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


@dataclass(frozen=True)
class PartitionPosition:
    topic: str
    partition: int
    committed: int  # the next offset the group will take (its committed position)
    end: int  # the next offset the partition will get

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


def group_positions(
    bootstrap: str, groups: Iterable[str], timeout_s: float = 3.0
) -> dict[str, list[PartitionPosition]]:
    """Each group's committed position and the end of each partition it has committed in
    (a group that committed nothing has an empty list)."""
    admin = _admin(bootstrap, timeout_s)
    # Every group's request at once, then the answers: one round trip's wait, not one each.
    asked = {
        # One group per request: the call accepts a list but serves only one group.
        group: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
        )[group]
        for group in groups
    }
    committed: dict[str, list[TopicPartition]] = {}
    for group, future in asked.items():
        found = future.result(timeout=timeout_s).topic_partitions or []
        committed[group] = [tp for tp in found if tp.offset >= 0]
    wanted = {TopicPartition(tp.topic, tp.partition) for tps in committed.values() for tp in tps}
    ends: dict[tuple[str, int], int] = {}
    if wanted:
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        answers = admin.list_offsets({tp: latest for tp in wanted}, request_timeout=timeout_s)
        for tp, future in answers.items():
            ends[(tp.topic, tp.partition)] = future.result(timeout=timeout_s).offset
    return {
        group: [
            PartitionPosition(tp.topic, tp.partition, tp.offset, ends[(tp.topic, tp.partition)])
            for tp in tps
        ]
        for group, tps in committed.items()
    }


def group_positions_isolated(
    bootstrap: str, groups: Iterable[str], timeout_s: float = 3.0
) -> dict[str, list[PartitionPosition]]:
    """``group_positions`` in a child process: for a process that must not end with it.

    librdkafka's offset lookup ends its process with SIGSEGV when a group's
    coordinator is not ready (a fresh cluster, a coordinator moving); here that
    is a KafkaUnavailable (core/isolated.py), and the commands that use it say so.
    """
    return call_isolated(
        group_positions, bootstrap, list(groups), timeout_s,
        timeout_s=timeout_s, failure=KafkaUnavailable, what="the consumer-group lookup",
    )  # fmt: skip


__all__ = [
    "KafkaException",
    "PartitionPosition",
    "group_of",
    "group_positions",
    "group_positions_isolated",
]


def oldest_pending_age(
    bootstrap: str, positions: Iterable[PartitionPosition], timeout_s: float = 3.0
) -> float | None:
    """Age in seconds of the oldest message a group has not yet taken (its timestamp at the
    committed position), over the partitions where it lags; None when it lags nowhere."""
    from confluent_kafka import Consumer as KafkaConsumer

    behind = [p for p in positions if p.lag > 0]
    if not behind:
        return None
    reader = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "handoff-backlog-peek",
                            "enable.auto.commit": False})  # fmt: skip
    oldest: float | None = None
    try:
        for p in behind:
            reader.assign([TopicPartition(p.topic, p.partition, p.committed)])
            msg = reader.poll(timeout_s)
            if msg is None or msg.error() is not None:
                continue
            kind, millis = msg.timestamp()
            if kind and millis > 0:
                at = millis / 1000
                oldest = at if oldest is None else min(oldest, at)
    finally:
        reader.close()
    return None if oldest is None else max(0.0, time.time() - oldest)
