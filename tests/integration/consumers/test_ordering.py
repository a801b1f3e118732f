"""Guard and order per consumer, document and run, on the real database and registry.

Events are the real outbox payloads of real handoffs, encoded in the wire
format with the registry's schema id and decoded through the registry;
the test chooses the order in which the runtime's Processor receives them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY

from handoff.consumers import Consumer, Event
from handoff.core import HandoffClient, HandoffTx
from handoff.core.identity import Credential
from handoff.core.quarantine import request_retry
from handoff.core.settings import HandoffSettings
from tests.fix_consumer import (
    InProcess,
    Payloads,
    Wire,
    effects,
    payloads,
    quarantined,
    record,
)


def versions(admin: psycopg.Connection[Any], tenant: str) -> list[tuple[int, int]]:
    return [(run, version) for _, _, run, version, _ in effects(admin, tenant)]


def test_in_order_then_redelivered_is_acknowledged_without_effect(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    p = story(3)
    consumer = audit()
    consumer.deliver(p["d", 1, 1], p["d", 1, 2], p["d", 1, 3])
    consumer.deliver(p["d", 1, 2])  # a redelivery: the same event, the same fingerprint
    consumer.deliver(p["d", 1, 1], p["d", 1, 3])
    assert versions(admin, tenant) == [(1, 1), (1, 2), (1, 3)]
    assert quarantined(admin, tenant) == []


def test_a_gap_waits_parked_and_goes_when_the_missing_version_arrives(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    p = story(3)
    consumer = audit(gap_wait_s=60)
    consumer.deliver(p["d", 1, 1], p["d", 1, 3])
    assert versions(admin, tenant) == [(1, 1)]
    parked = admin.execute(
        "SELECT version, reason FROM handoff.consumer_parked WHERE tenant_id = %s", (tenant,)
    ).fetchall()
    assert parked == [(3, "gap")]
    consumer.sweep()  # still missing and not yet expired: stays parked
    assert versions(admin, tenant) == [(1, 1)]
    consumer.deliver(p["d", 1, 2])
    consumer.sweep()
    assert versions(admin, tenant) == [(1, 1), (1, 2), (1, 3)]
    assert admin.execute(
        "SELECT count(*) FROM handoff.consumer_parked WHERE tenant_id = %s", (tenant,)
    ).fetchone() == (0,)


def test_a_gap_that_outlasts_its_wait_is_reconciled_and_the_late_event_is_stale(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    p = story(3)
    consumer = audit(gap_wait_s=0)
    consumer.deliver(p["d", 1, 1], p["d", 1, 3])
    consumer.sweep()  # the wait ran out: act on v3, which carries the state after v2
    assert versions(admin, tenant) == [(1, 1), (1, 3)]
    consumer.deliver(p["d", 1, 2])  # arrives at last: older than the position
    assert versions(admin, tenant) == [(1, 1), (1, 3)]
    assert quarantined(admin, tenant) == []


def test_an_unexpected_future_version_is_quarantined(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    p = story(2)
    consumer = audit()
    forged = {**p["d", 1, 2], "version": 9, "eventId": "from-elsewhere"}
    consumer.deliver(p["d", 1, 1], forged)
    assert versions(admin, tenant) == [(1, 1)]
    [entry] = quarantined(admin, tenant)
    assert entry["category"] == "unexpected_version" and entry["version"] == 9
    assert "version 2" in entry["error"]


def test_a_new_run_starts_again_at_version_one_and_the_old_run_is_stale(
    story: Any,
    audit: Any,
    admin: psycopg.Connection[Any],
    tenant: str,
    service: Callable[..., Credential],
) -> None:
    story(2)
    worker, creator = service("worker2"), service("creator2", can_create=True)
    with HandoffClient.direct(Credential.parse(_token(admin, tenant, "worker"))) as w:
        w.emit(
            event_id="d-done",
            event_type="routed",
            document_id="d",
            next_owner=None,
            status="done",
            expected_version=2,
        )
    with HandoffClient.direct(creator) as c:
        c.start_run(event_id="d-run2", document_id="d", owner="worker2", status="again")
    assert worker  # registered so the second run has an owner
    p = payloads(admin, tenant)
    consumer = audit()
    consumer.deliver(p["d", 1, 1], p["d", 1, 2], p["d", 2, 1])
    consumer.deliver(p["d", 1, 3])  # the end of run 1, after run 2 began: an older run
    assert versions(admin, tenant) == [(1, 1), (1, 2), (2, 1)]


def _token(admin: psycopg.Connection[Any], tenant: str, name: str) -> str:
    # Tests keep credentials from the service fixture; this re-issues one.
    from handoff.core.services import rotate_service

    return rotate_service(admin, name, tenant=tenant).token


def test_an_event_id_reused_with_other_content_is_quarantined_not_applied(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    p = story(1)
    consumer = audit()
    consumer.deliver(p["d", 1, 1])
    consumer.deliver({**p["d", 1, 1], "status": "tampered"})
    assert versions(admin, tenant) == [(1, 1)]
    [entry] = quarantined(admin, tenant)
    assert entry["category"] == "conflicting_reuse" and entry["event_id"] == "d-1"


def test_a_poison_event_is_quarantined_its_document_waits_others_flow_and_a_retry_applies_once(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(3, "bad")
    p = story(2, "good")
    cured: set[str] = set()
    attempts: list[int] = []

    def fragile(event: Event, tx: HandoffTx) -> None:
        if event.document_id == "bad" and event.version == 1 and "bad" not in cured:
            attempts.append(1)
            raise RuntimeError("downstream refuses bad v1")
        record(event, tx)

    consumer = audit(fragile, max_deliveries=3)
    consumer.deliver(p["bad", 1, 1], p["good", 1, 1], p["bad", 1, 2], p["good", 1, 2])
    consumer.deliver(p["bad", 1, 3])
    assert [(d, v) for _, d, _, v, _ in effects(admin, tenant)] == [("good", 1), ("good", 2)]
    assert len(attempts) == 3  # max deliveries, then quarantine [SQS maxReceiveCount]
    [entry] = quarantined(admin, tenant)
    assert (entry["category"], entry["attempts"], entry["status"]) == ("handler_error", 3, "open")
    assert entry["handler"] == "fragile" and "downstream refuses" in entry["error"]
    parked = admin.execute(
        "SELECT version FROM handoff.consumer_parked WHERE tenant_id = %s ORDER BY version",
        (tenant,),
    ).fetchall()
    assert parked == [(2,), (3,)]
    consumer.sweep()  # nothing moves while the entry is open
    assert len(effects(admin, tenant)) == 2

    cured.add("bad")
    request_retry(admin, entry["id"], actor="ops-alice", reason="downstream fixed")
    consumer.sweep()  # the retry, through the guard
    consumer.sweep()  # then the parked events, in version order
    consumer.sweep()  # nothing left: no second effect
    bad = [v for _, d, _, v, _ in effects(admin, tenant) if d == "bad"]
    assert bad == [1, 2, 3]
    [entry] = quarantined(admin, tenant)
    assert entry["status"] == "resolved"
    trail = admin.execute(
        "SELECT actor, action, detail FROM handoff.quarantine_audit WHERE quarantine_id = %s"
        " ORDER BY at, id",  # as handoff quarantine show reads it (quarantine_sql.AUDIT)
        (entry["id"],),
    ).fetchall()
    assert [a for _, a, _ in trail] == ["quarantined", "retry requested", "resolved"]
    assert trail[1][0] == "ops-alice" and trail[1][2] == "downstream fixed"


def test_a_rejected_handoff_is_an_invalid_transition_and_leaves_no_effect(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    p = story(1)

    def moves_wrongly(event: Event, tx: HandoffTx) -> None:
        record(event, tx)
        tx.emit(  # audit does not own the document: refused
            event_id=event.next_event_id("steal"),
            event_type="routed",
            document_id=event.document_id,
            next_owner="audit",
            status="stolen",
            expected_version=event.version,
        )

    audit(moves_wrongly).deliver(p["d", 1, 1])
    assert effects(admin, tenant) == []
    [entry] = quarantined(admin, tenant)
    assert entry["category"] == "invalid_transition" and "OwnershipMismatch" in entry["error"]
    assert entry["attempts"] == 1  # the identical retry would be refused identically


def test_a_batch_with_one_poison_event_still_applies_its_neighbours_once(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(1, "a")
    story(1, "b")
    p = story(1, "c")

    def picky(event: Event, tx: HandoffTx) -> None:
        record(event, tx)
        if event.document_id == "b":
            raise ValueError("b is malformed for this handler")

    audit(picky, max_deliveries=2).deliver(p["a", 1, 1], p["b", 1, 1], p["c", 1, 1])
    assert sorted(d for _, d, _, _, _ in effects(admin, tenant)) == ["a", "c"]
    [entry] = quarantined(admin, tenant)
    assert entry["document_id"] == "b" and entry["attempts"] == 2


def test_an_absent_field_and_an_empty_string_reach_the_handler_as_they_were_sent(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    story(1, "absent")
    p = story(1, "empty")
    seen: dict[str, tuple[Any, Any]] = {}

    def look(event: Event, tx: HandoffTx) -> None:
        seen[event.document_id] = (event.causation_id, event.data.get("memo", "<missing>"))
        record(event, tx)

    consumer = audit(look)
    # Another producer's envelope: an empty causation id and an empty memo.
    consumer.deliver(
        p["absent", 1, 1],
        {**p["empty", 1, 1], "causationId": "", "data": {"memo": ""}},
    )
    assert seen == {"absent": (None, "<missing>"), "empty": ("", "")}


def test_a_one_event_unit_claims_with_its_writes_and_a_duplicate_takes_the_long_way(
    story: Any, audit: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    """Batch 1 runs the handler before the verdict; the claim keeps a duplicate's work out."""
    p = story(1)
    seen: list[str] = []

    def once_only(event: Event, tx: HandoffTx) -> None:
        seen.append(event.event_id)
        tx.append(  # deferred: sent with the claim and the COMMIT, in one message
            "consumer_test.effects",
            ("tenant_id", "consumer", "event_id", "document_id", "run_id", "version",
             "occurred_at"),
            (event.tenant_id, "audit", event.event_id, event.document_id, event.run_id,
             event.version, event.occurred_at),
        )  # fmt: skip
        if len(seen) > 1:
            raise RuntimeError("a handler that fails when it sees an event again")

    consumer = audit(once_only)
    unclaimed = (
        REGISTRY.get_sample_value("handoff_consumer_unclaimed_total", {"consumer": "audit"}) or 0.0
    )
    assert consumer.processor.run_one(consumer.item(p["d", 1, 1])) == "apply"
    # Redelivered: the handler runs (and fails), the claim refuses, the unit
    # rolls back, and the verdict-first unit acknowledges it without effect.
    assert consumer.processor.run_one(consumer.item(p["d", 1, 1])) == "duplicate"
    assert seen == ["d-1", "d-1"]
    assert versions(admin, tenant) == [(1, 1)]
    assert quarantined(admin, tenant) == []
    assert (
        REGISTRY.get_sample_value("handoff_consumer_unclaimed_total", {"consumer": "audit"})
        == unclaimed + 1
    )


@pytest.fixture
def handing(
    service: Callable[..., Credential], effects_table: HandoffSettings, wire: Wire,
    admin: psycopg.Connection[Any], tenant: str,
) -> Iterator[Callable[..., tuple[InProcess, Payloads]]]:  # fmt: skip
    """An in-process consumer "worker" of its own created events, and "next", a service it
    hands them to; ``make(handler, docs)`` creates the documents for worker first."""
    opened: list[InProcess] = []
    creator, worker = service("creator", can_create=True), service("worker")
    service("next")

    def make(
        handler: Callable[[Event, HandoffTx], None], docs: list[str], **config: Any
    ) -> tuple[InProcess, Payloads]:
        with HandoffClient.direct(creator) as c:
            for doc in docs:
                c.create(event_id=f"{doc}-1", document_id=doc, owner="worker", status="new")
        app = Consumer("worker", worker)
        app.add_handler("created", handler)
        consumer = InProcess(effects_table, app, wire, **config)
        opened.append(consumer)
        return consumer, payloads(admin, tenant)

    yield make
    for consumer in opened:
        consumer.close()


def _owners(admin: psycopg.Connection[Any], tenant: str) -> dict[str, tuple[str, int]]:
    rows = admin.execute(
        "SELECT document_id, owner, version FROM handoff.document_state WHERE tenant_id = %s",
        (tenant,),
    ).fetchall()
    return {doc: (owner, version) for doc, owner, version in rows}


def _hands_on_unawaited(answers: list[Any]) -> Callable[[Event, HandoffTx], None]:
    """Records the event, then hands the document to next (b to nobody: refused)."""

    def handler(event: Event, tx: HandoffTx) -> None:
        record(event, tx)
        to = "nobody" if event.document_id == "b" else "next"
        answers.append(tx.hand_on(event, "handed", to=to, status="handed", wait=False))

    return handler


def test_unawaited_handoffs_commit_with_their_batch(
    handing: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    answers: list[Any] = []
    consumer, p = handing(_hands_on_unawaited(answers), ["a", "c"])
    consumer.deliver(p["a", 1, 1], p["c", 1, 1])
    assert answers == [None, None]  # nothing awaited
    assert sorted(d for _, d, _, _, _ in effects(admin, tenant)) == ["a", "c"]
    assert _owners(admin, tenant) == {"a": ("next", 2), "c": ("next", 2)}
    assert quarantined(admin, tenant) == []


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "one event"])
def test_a_refused_unawaited_handoff_fails_its_unit_and_costs_only_its_event(
    handing: Any, admin: psycopg.Connection[Any], tenant: str, batch: bool
) -> None:
    """The refusal surfaces at the commit as the error a refused handoff raises: the unit
    keeps nothing, its neighbours go one at a time, the event is an invalid transition."""
    consumer, p = handing(_hands_on_unawaited([]), ["a", "b", "c"])
    if batch:
        consumer.deliver(p["a", 1, 1], p["b", 1, 1], p["c", 1, 1])
    else:
        for doc in ("a", "b", "c"):
            consumer.deliver(p[doc, 1, 1])  # the claimed unit: one message in all
    assert sorted(d for _, d, _, _, _ in effects(admin, tenant)) == ["a", "c"]
    assert _owners(admin, tenant) == {"a": ("next", 2), "b": ("worker", 1), "c": ("next", 2)}
    [entry] = quarantined(admin, tenant)
    assert entry["document_id"] == "b" and entry["category"] == "invalid_transition"
    assert "UnknownOwner" in entry["error"] and "nobody" in entry["error"]
    assert entry["attempts"] == 1  # the identical retry would be refused identically
