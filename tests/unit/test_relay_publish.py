"""The relay's publish step with a fake producer built on confluent-kafka's interface.

Deliveries that fail are reported by value (failure reports only); the relay
must mark only each document's acked prefix, and send the rest again later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from handoff.core.events import current_schema
from handoff.core.outbox_sql import IdArray
from handoff.core.settings import HandoffSettings
from handoff.relay.cursor import Fetched
from handoff.relay.relay import Batch, Relay, Row
from handoff.relay.settings import RelaySettings


class FakeMessage:
    def __init__(self, key: bytes, value: bytes) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value


class FakeError:
    def fatal(self) -> bool:
        return False

    def code(self) -> int:
        return KafkaError._MSG_TIMED_OUT

    def __str__(self) -> str:
        return "Local: Message timed out"


class FakeProducer:
    """produce() queues; flush() reports the failures of the chosen event ids, like librdkafka."""

    def __init__(self, on_delivery: Callable[[Any, Any], None], failing: set[str]) -> None:
        self.on_delivery = on_delivery
        self.failing = failing
        self.produced: list[tuple[str, bytes, bytes, list[Any]]] = []

    def produce(self, topic: str, *, value: bytes, key: bytes, headers: list[Any]) -> None:
        self.produced.append((topic, value, key, headers))

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        for _, value, key, _ in self.produced:
            if any(event_id.encode() in value for event_id in self.failing):
                self.on_delivery(FakeError(), FakeMessage(key, value))
        return 0


def _row(row_id: int, doc: str, version: int, *, held_behind: int | None = None) -> Row:
    micros = 1_795_996_601_831_820
    return Row(
        row_id,
        "t",
        doc,
        version,
        "step",
        {
            "eventId": f"{doc}-v{version}",
            "eventType": "step",
            "source": "a",
            "occurredAt": micros,
            "tenantId": "t",
            "documentId": doc,
            "runId": 1,
            "version": version,
            "correlationId": None,
            "causationId": None,
            "owner": "b",
            "previousOwner": "a",
            "status": "s",
            "assignedAt": micros,
            "dueAt": None,
            "completed": False,
            "completedAt": None,
            "data": {"n": row_id},
        },
        held_behind,
    )


def _batch(*rows: Row) -> Batch:
    ids = [row.id for row in rows]
    fetched = Fetched(ids[0], ids[-1], ",".join(map(str, ids)))
    return Batch(list(rows), fetched, retry=False, fetched_at=1_795_996_601.5)


def _relay(failing: set[str], **config: Any) -> tuple[Relay, FakeProducer]:
    relay = Relay(HandoffSettings(), RelaySettings(**config))
    relay.schema = current_schema()
    relay.schema_ids = {"handoff.events": 7}
    fake = FakeProducer(relay._delivered, failing)
    relay.producer = fake  # type: ignore[assignment]
    return relay, fake


def test_only_each_documents_acked_prefix_is_settled_with_fake_producer() -> None:
    relay, fake = _relay(failing={"x-v2"})
    rows = [_row(1, "x", 1), _row(2, "y", 1), _row(3, "x", 2), _row(4, "y", 2), _row(5, "x", 3)]
    failed_docs: set[tuple[str, str]] = set()
    outcome = relay._publish(_batch(*rows), failed_docs).account(rows)
    assert len(fake.produced) == 5
    # x-v2 failed: x-v3 (acked or not) waits for it; x-v1 and all of y are done.
    assert outcome.acked == [1, 2, 4]
    assert outcome.undelivered == [3, 5]  # fetched again, in their order
    assert outcome.failed
    assert failed_docs == {("t", "x")}
    # The next batch leaves x alone until a retry batch (nothing in flight) resends it.
    later = relay._publish(_batch(_row(6, "x", 4), _row(7, "y", 3)), failed_docs)
    assert later.acked == [7]
    assert [p[2] for p in fake.produced[5:]] == [b"t/y"]


def test_everything_acked_with_fake_producer() -> None:
    relay, fake = _relay(failing=set())
    outcome = relay._publish(_batch(_row(1, "x", 1), _row(2, "x", 2)), set())
    assert outcome.acked == [1, 2] and not outcome.failed
    assert [h for h in fake.produced[0][3] if h[0] == "version"] == [("version", b"1")]
    assert not [h for h in fake.produced[0][3] if h[0].startswith("relay")]  # trace_timing off


def test_timing_headers_when_asked_with_fake_producer() -> None:
    relay, fake = _relay(failing=set(), trace_timing=True)
    batch = _batch(_row(1, "x", 1))
    batch.fetched_at = time.time() - 0.25
    relay._publish(batch, set())
    marks = dict(fake.produced[0][3])
    assert int(marks["relayFetchedAt"]) == int(batch.fetched_at * 1e6)
    assert int(batch.fetched_at * 1e6) + 249_000 <= int(marks["relayProducedAt"])
    assert int(marks["relayProducedAt"]) <= time.time() * 1e6


def test_rows_behind_a_parked_row_are_parked_too_with_fake_producer() -> None:
    relay, fake = _relay(failing=set())
    bad = _row(2, "x", 2)
    del bad.payload["status"]  # cannot be written as an event
    rows = [_row(1, "x", 1), bad, _row(3, "y", 1), _row(4, "x", 3), _row(5, "z", 4, held_behind=1)]
    outcome = relay._publish(_batch(*rows), set()).account(rows)
    assert outcome.acked == [1, 3]
    assert [(row.id, r.split(":")[0]) for row, r in outcome.parked][1:] == [
        (4, "held behind parked outbox row 2"), (5, "held behind parked outbox row 1"),
    ]  # fmt: skip
    assert outcome.parked[0][0].id == 2 and "status" in outcome.parked[0][1]
    assert outcome.undelivered == [] and not outcome.failed
    assert [p[2] for p in fake.produced] == [b"t/x", b"t/y"]


def test_id_arrays_are_postgres_array_text() -> None:
    assert IdArray.of([]) == "{}"
    assert IdArray.of([3, 1, 2]) == "{3,1,2}"
    assert IdArray.joined(["5,9", "12"]) == "{5,9,12}"
