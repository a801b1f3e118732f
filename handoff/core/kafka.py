"""Kafka clients, built in one place: consumers, producers, admin clients, group lag.

Every librdkafka client of the project is made here, so that its settings
(and their why-comments) live in one module:

- ``group_consumer``: a member of a consumer group that stores offsets by
  hand after the database commit (the consumer runtime);
- ``reader``: a consumer that reads positions it is given and commits
  nothing (replay, projections, plans, the backlog's peek);
- ``producer``: the relay's idempotent, ordered producer;
- ``admin``: one admin client per cluster per process; ``ensure_topics``;
- group lag: ``group_positions`` (and ``group_positions_isolated``, in a
  child process, for processes that must not end with librdkafka's crash);
- librdkafka's log lines during an outage, folded into one (``client_logger``).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from handoff.core.errors import KafkaUnavailable, Unavailable
from handoff.core.isolated import call_isolated
from handoff.core.outage import Outage

__all__ = [
    "OFFSET_INVALID",
    "UNREACHABLE",
    "KafkaError",
    "KafkaException",
    "Message",
    "PartitionPosition",
    "TopicPartition",
    "admin",
    "client_logger",
    "ensure_topics",
    "group_consumer",
    "group_of",
    "group_positions",
    "group_positions_isolated",
    "is_outage",
    "oldest_pending_age",
    "producer",
    "reader",
]

log = logging.getLogger("handoff.kafka")


# -- consumers ---------------------------------------------------------------------------


def group_consumer(
    bootstrap: str,
    group: str,
    *,
    client_id: str,
    session_timeout_s: float,
    commit_interval_s: float,
    instance_id: str | None = None,
    logger: logging.Logger = log,
) -> Consumer:
    """A group member whose offsets the caller stores, after the database commit."""
    static = {"group.instance.id": instance_id} if instance_id else {}
    return Consumer(
        {
            **static,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            # An offset is stored by hand, only after the database commit of its
            # message; librdkafka commits the stored offsets every interval and on
            # close. One commit request per batch would cost a broker round trip
            # each (thousands a second at batch 1).
            "enable.auto.commit": True,
            "auto.commit.interval.ms": int(commit_interval_s * 1000),
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": int(session_timeout_s * 1000),
            "logger": logger,
        }
    )


def reader(bootstrap: str, group: str, *, eof: bool = False) -> Consumer:
    """A consumer for positions the caller assigns: it commits nothing (the group id
    only names it to the broker); ``eof`` reports each partition's end."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": eof,
        }
    )


# -- producers ---------------------------------------------------------------------------


def producer(
    bootstrap: str,
    *,
    linger_ms: int,
    delivery_timeout_s: float,
    error_cb: Callable[[KafkaError], None] | None = None,
    on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    logger: logging.Logger = log,
) -> Producer:
    """The relay's producer: idempotent, acks from all in-sync replicas, no gaps."""
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


# -- admin -------------------------------------------------------------------------------

_admins: dict[tuple[str, float, str], AdminClient] = {}
_admins_lock = threading.Lock()


def admin(bootstrap: str, timeout_s: float = 10.0, logger: logging.Logger = log) -> AdminClient:
    """One admin client per cluster for the process: making one costs a connection and
    a metadata round trip (~50 ms, measured), more than the lookups themselves."""
    with _admins_lock:
        key = (bootstrap, timeout_s, logger.name)
        if key not in _admins:
            _admins[key] = AdminClient(
                {
                    "bootstrap.servers": bootstrap,
                    "socket.timeout.ms": int(timeout_s * 1000),
                    "logger": logger,  # type: ignore[dict-item]
                }
            )
        return _admins[key]


def ensure_topics(
    bootstrap: str, topics: list[str], partitions: int, config: Mapping[str, str] | None = None
) -> None:
    """Create the topics that do not exist yet (the broker's replication factor;
    ``config``: topic settings, such as the benchmarks' LogAppendTime)."""
    futures = admin(bootstrap).create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=-1, config=dict(config or {}))
         for t in topics],
        request_timeout=15,
    )  # fmt: skip
    for topic, future in futures.items():
        try:
            future.result(timeout=20)
        except KafkaException as exc:
            if exc.args and exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
                continue
            raise Unavailable(f"cannot create topic {topic}: {exc}") from exc


def delete_topics(bootstrap: str, topics: Iterable[str]) -> None:
    """Delete ``topics``; one that is gone already is no error."""
    names = list(topics)
    if not names:
        return
    for future in admin(bootstrap).delete_topics(names, operation_timeout=30).values():
        with contextlib.suppress(KafkaException):
            future.result(60)


# -- cluster health ----------------------------------------------------------------------


def describe_brokers(
    up: int, missing: Sequence[int], under_replicated: int, offline: int, since: str = ""
) -> str:
    """The one line the operate page and ``handoff backlog`` say about the brokers."""
    line = f"Kafka: {up} broker{'s' if up != 1 else ''} up"
    if missing:
        line += f", broker {', '.join(map(str, missing))} missing"
        line += f" since {since}" if since else ""
    counts = ((under_replicated, "under-replicated"), (offline, "offline"))
    problems = [f"{n} partitions {what}" for n, what in counts if n]
    if not problems:
        return f"{line}, every partition fully replicated"
    return f"{line}; {', '.join(problems)}"


@dataclass(frozen=True)
class ClusterHealth:
    """What a metadata request says about the brokers of a cluster."""

    up: tuple[int, ...]  # node ids of the brokers that answer
    missing: tuple[int, ...]  # named as a replica of some partition, but not up
    under_replicated: int  # partitions with fewer in-sync replicas than replicas
    offline: int  # partitions without a leader: unreadable and unwritable until one is back
    leading: Mapping[int, int]  # node id -> partitions it leads
    catching_up: Mapping[int, int]  # node id -> partitions it holds but is not in sync on

    def summary(self) -> str:
        return describe_brokers(len(self.up), self.missing, self.under_replicated, self.offline)


def cluster_health(
    bootstrap: str, timeout_s: float = 3.0, logger: logging.Logger = log
) -> ClusterHealth:
    """The brokers up and missing, from one metadata request.

    A broker that is down is absent from the metadata's broker list but still
    named in the replica sets of its partitions: that is how it is known to
    be missing without a list of expected brokers anywhere.
    """
    meta = admin(bootstrap, timeout_s, logger).list_topics(timeout=timeout_s)
    up = set(meta.brokers)
    partitions = [p for topic in meta.topics.values() for p in topic.partitions.values()]
    named = {replica for p in partitions for replica in p.replicas}
    return ClusterHealth(
        up=tuple(sorted(up)),
        missing=tuple(sorted(named - up)),
        under_replicated=sum(1 for p in partitions if len(p.isrs) < len(p.replicas)),
        offline=sum(1 for p in partitions if p.leader < 0),
        leading=Counter(p.leader for p in partitions if p.leader >= 0),
        catching_up=Counter(r for p in partitions for r in p.replicas if r not in p.isrs),
    )


# -- group lag ---------------------------------------------------------------------------
# A consumer's group is ``handoff.<tenant>.<service>`` unless it was given another
# (HANDOFF_CONSUMER_GROUP); only the default names are looked up here. Blocking
# calls with a deadline: run them in a thread, or in a child process.


def group_of(tenant: str, consumer: str) -> str:
    return f"handoff.{tenant}.{consumer}"


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
    client = admin(bootstrap, timeout_s)
    # Every group's request at once, then the answers: one round trip's wait, not one each.
    asked = {
        # One group per request: the call accepts a list but serves only one group.
        group: client.list_consumer_group_offsets(
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
        answers = client.list_offsets({tp: latest for tp in wanted}, request_timeout=timeout_s)
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


def oldest_pending_age(
    bootstrap: str, positions: Iterable[PartitionPosition], timeout_s: float = 3.0
) -> float | None:
    """Age in seconds of the oldest message a group has not yet taken (its timestamp at the
    committed position), over the partitions where it lags; None when it lags nowhere."""
    behind = [p for p in positions if p.lag > 0]
    if not behind:
        return None
    peek = reader(bootstrap, "handoff-backlog-peek")
    oldest: float | None = None
    try:
        for p in behind:
            peek.assign([TopicPartition(p.topic, p.partition, p.committed)])
            msg = peek.poll(timeout_s)
            if msg is None or msg.error() is not None:
                continue
            kind, millis = msg.timestamp()
            if kind and millis > 0:
                at = millis / 1000
                oldest = at if oldest is None else min(oldest, at)
    finally:
        peek.close()
    return None if oldest is None else max(0.0, time.time() - oldest)


# -- librdkafka's logs during an outage ---------------------------------------------------

# What librdkafka says about a broker it cannot reach (its FAIL, ERROR, REQTMOUT and
# BROKERFAIL facilities), whatever the client.
UNREACHABLE = re.compile(
    r"Connect to .* failed|Disconnected|brokers are down|Connection refused|timed out"
    r"|Receive failed|Send failed|Failed to resolve|Timed out|REQTMOUT|BROKERFAIL"
)
# The errors the error callback and messages carry for the same condition.
TRANSPORT = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                       KafkaError._TIMED_OUT, KafkaError._RESOLVE,
                       KafkaError._MSG_TIMED_OUT})  # fmt: skip


class _FoldOutage(logging.Filter):
    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            text = record.getMessage()
            if UNREACHABLE.search(text):
                self.outage.failed(text)
                return False
        return True


def client_logger(name: str, outage: Outage) -> logging.Logger:
    """A logger for a librdkafka client's ``logger`` setting, whose outage lines go to
    ``outage``; one per name (the filter is added once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _FoldOutage) for f in logger.filters):
        logger.addFilter(_FoldOutage(outage))
    return logger


def is_outage(error: KafkaError) -> bool:
    """Whether an error of a message or the error callback means: a broker is away."""
    return error.code() in TRANSPORT
