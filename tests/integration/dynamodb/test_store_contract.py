"""One contract suite, run over both stores: PostgreSQL and the AWS design's DynamoDB
table (moto's server). Where the stores legitimately differ (a GSI read after a write),
the test says so in its name and checks the documented behaviour."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from handoff.core.identity import Credential
from handoff.core.models import (
    CreateRequest,
    HandoffRequest,
    Receipt,
    Rejection,
    StartRunRequest,
)
from handoff.core.settings import HandoffSettings
from handoff.core.store import PostgresStore, Store
from handoff.dynamo import schema as k
from handoff.stack.procs import wait_until


def _tenant() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def _create(store: Store, cred: Credential, doc: str, owner: str, **more: object) -> Receipt:
    found = store.send(cred, CreateRequest(event_id=f"{doc}-c", document_id=doc, owner=owner,
                                           status="new", **more))  # type: ignore[arg-type]  # fmt: skip
    assert isinstance(found, Receipt), found
    return found


def _handoff(
    store: Store, cred: Credential, doc: str, to: str | None, version: int, *,
    event_id: str | None = None, status: str = "moved",
) -> Receipt | Rejection:  # fmt: skip
    return store.send(cred, HandoffRequest(
        event_id=event_id or f"{doc}-{version}-{uuid.uuid4().hex[:6]}", event_type="moved",
        document_id=doc, next_owner=to, status=status, expected_version=version))  # fmt: skip


def test_the_invoice_42_story(store: Store) -> None:
    t = _tenant()
    intake = store.add_service(t, "intake", can_create=True)
    routing, review = store.add_service(t, "routing"), store.add_service(t, "review")
    store.add_service(t, "finalization")
    first = _create(store, intake, "invoice-42", "routing", data={"amount": 1200})
    assert (first.version, first.owner, first.run_id) == (1, "routing", 1)
    second = _handoff(store, routing, "invoice-42", "review", 1)
    assert isinstance(second, Receipt) and (second.version, second.owner) == (2, "review")
    third = _handoff(store, review, "invoice-42", "finalization", 2, status="approved")
    assert isinstance(third, Receipt) and third.version == 3
    doc = store.document(t, "invoice-42")
    assert doc is not None and (doc["owner"], doc["status"], doc["version"]) == (
        "finalization", "approved", 3)  # fmt: skip
    assert doc["data"] == {"amount": 1200}
    steps = [(h["version"], h["previousOwner"], h["owner"]) for h in
             store.history(t, "invoice-42", 1)]  # fmt: skip
    assert steps == [(1, None, "routing"), (2, "routing", "review"), (3, "review", "finalization")]
    assert store.owner_counts(t) == {"finalization": 1}


def test_creation_rules(store: Store) -> None:
    t = _tenant()
    maker, worker = store.add_service(t, "maker", can_create=True), store.add_service(t, "worker")
    _create(store, maker, "d-1", "worker")
    refused = store.send(worker, CreateRequest(event_id="w-c", document_id="d-2",
                                               owner="worker", status="new"))  # fmt: skip
    assert isinstance(refused, Rejection) and refused.code == "NotPermitted"
    again = store.send(maker, CreateRequest(event_id="d-1-again", document_id="d-1",
                                            owner="worker", status="new"))  # fmt: skip
    assert isinstance(again, Rejection) and again.code == "AlreadyExists"
    unknown = store.send(maker, CreateRequest(event_id="d-3-c", document_id="d-3",
                                              owner="nobody", status="new"))  # fmt: skip
    assert isinstance(unknown, Rejection) and unknown.code == "UnknownOwner"


def test_a_new_run_only_after_the_last_finished(store: Store) -> None:
    t = _tenant()
    maker, worker = store.add_service(t, "maker", can_create=True), store.add_service(t, "worker")
    _create(store, maker, "doc", "worker")
    busy = store.send(maker, StartRunRequest(event_id="r2", owner="worker", status="again"), "doc")
    assert isinstance(busy, Rejection) and busy.code == "RunInProgress"
    assert isinstance(_handoff(store, worker, "doc", None, 1, status="done"), Receipt)
    started = store.send(maker, StartRunRequest(event_id="r2b", owner="worker", status="again"),
                         "doc")  # fmt: skip
    assert isinstance(started, Receipt) and (started.run_id, started.version) == (2, 1)
    latest = store.document(t, "doc")
    assert latest is not None and (latest["run_id"], latest["owner"]) == (2, "worker")
    first = store.document(t, "doc", 1)
    assert first is not None and first["owner"] is None and first["status"] == "done"


def test_tenants_do_not_see_each_other(store: Store) -> None:
    a, b = _tenant(), _tenant()
    maker_a = store.add_service(a, "maker", can_create=True)
    store.add_service(a, "worker")
    maker_b = store.add_service(b, "maker", can_create=True)
    store.add_service(b, "worker")
    _create(store, maker_a, "same-id", "worker")
    assert store.document(b, "same-id") is None
    _create(store, maker_b, "same-id", "worker")  # the same id is another document there
    assert store.owner_counts(a) == {"worker": 1} and store.owner_counts(b) == {"worker": 1}


def test_racing_emits_on_one_version_one_wins(store: Store) -> None:
    t = _tenant()
    maker, worker = store.add_service(t, "maker", can_create=True), store.add_service(t, "worker")
    for name in ("a", "b", "c", "d"):
        store.add_service(t, name)
    _create(store, maker, "race", "worker")
    answers: list[Receipt | Rejection] = []
    lock = threading.Lock()

    def go(target: str) -> None:
        found = _handoff(store, worker, "race", target, 1)
        with lock:
            answers.append(found)

    threads = [threading.Thread(target=go, args=(n,)) for n in ("a", "b", "c", "d")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [a for a in answers if isinstance(a, Receipt)]
    lost = [a for a in answers if isinstance(a, Rejection)]
    assert len(won) == 1 and len(lost) == 3
    assert {r.code for r in lost} <= {"VersionMismatch", "OwnershipMismatch"}
    doc = store.document(t, "race")
    assert doc is not None and doc["version"] == 2 and doc["owner"] == won[0].owner
    assert store.owner_counts(t) == {won[0].owner: 1}  # type: ignore[dict-item]


def test_identical_duplicate_answers_the_receipt_and_conflicting_reuse_is_refused(
    store: Store,
) -> None:
    t = _tenant()
    maker, worker = store.add_service(t, "maker", can_create=True), store.add_service(t, "worker")
    store.add_service(t, "next")
    _create(store, maker, "dup", "worker")
    first = _handoff(store, worker, "dup", "next", 1, event_id="e-1")
    again = _handoff(store, worker, "dup", "next", 1, event_id="e-1")
    assert isinstance(first, Receipt) and isinstance(again, Receipt)
    assert (again.version, again.replayed) == (first.version, True)
    other = _handoff(store, worker, "dup", "worker", 1, event_id="e-1")
    assert isinstance(other, Rejection) and other.code == "ConflictingEventReuse"
    assert store.document(t, "dup")["version"] == 2  # type: ignore[index]


def test_crossing_handoffs_all_go_through(store: Store) -> None:
    t = _tenant()
    maker = store.add_service(t, "maker", can_create=True)
    creds = {n: store.add_service(t, n) for n in ("left", "right")}
    for i in range(6):
        _create(store, maker, f"x{i}", "left" if i % 2 else "right")
    errors: list[object] = []

    def bounce(doc: str, start: str) -> None:
        owner, other = start, "right" if start == "left" else "left"
        for version in range(1, 5):
            found = _handoff(store, creds[owner], doc, other, version)
            if not isinstance(found, Receipt):
                errors.append(found)
                return
            owner, other = other, owner

    threads = [threading.Thread(target=bounce, args=(f"x{i}", "left" if i % 2 else "right"))
               for i in range(6)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.owner_counts(t) == {"left": 3, "right": 3}


def test_rejections_are_recorded(store: Store) -> None:
    t = _tenant()
    maker, worker = store.add_service(t, "maker", can_create=True), store.add_service(t, "worker")
    _create(store, maker, "r", "worker")
    refused = _handoff(store, maker, "r", "worker", 1)
    assert isinstance(refused, Rejection) and refused.code == "OwnershipMismatch"
    stale = _handoff(store, worker, "r", "worker", 7)
    assert isinstance(stale, Rejection) and stale.code == "VersionMismatch"
    assert stale.current_version == 1
    found = [(r["code"], r["document_id"]) for r in store.rejections(t)]
    assert ("OwnershipMismatch", "r") in found and ("VersionMismatch", "r") in found


def test_owner_pages_may_lag_on_an_eventually_consistent_index(store: Store) -> None:
    """PostgreSQL answers at once; DynamoDB's GSIs are eventually consistent, so the test
    waits for the page (moto applies them at once; AWS within a second, usually)."""
    t = _tenant()
    maker = store.add_service(t, "maker", can_create=True)
    store.add_service(t, "worker")
    late = datetime.now(UTC) - timedelta(hours=1)
    for i, due in enumerate((None, late, datetime.now(UTC) + timedelta(hours=2))):
        _create(store, maker, f"o{i}", "worker", due_at=due)

    def listed() -> bool:
        return [d["document_id"] for d in store.owner_documents(t, "worker")] == ["o0", "o1", "o2"]

    assert wait_until(listed, 5)
    overdue = store.owner_documents(t, "worker", overdue=True)
    assert [d["document_id"] for d in overdue] == ["o1"]


@pytest.mark.parametrize("field", ["document", "history"])
def test_reads_of_a_document_are_strongly_consistent(store: Store, field: str) -> None:
    t = _tenant()
    maker, worker = store.add_service(t, "maker", can_create=True), store.add_service(t, "worker")
    _create(store, maker, "s", "worker")
    for version in range(1, 4):
        assert isinstance(_handoff(store, worker, "s", "worker", version), Receipt)
        if field == "document":
            assert store.document(t, "s")["version"] == version + 1  # type: ignore[index]
        else:
            assert len(store.history(t, "s", 1)) == version + 1


def test_both_stores_fingerprint_a_request_alike(
    dynamo_store: Any, migrated: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    """A receipt ported between the stores must still recognise an identical retry."""
    postgres = PostgresStore(migrated.database_url)
    t = _tenant()
    due = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    request = CreateRequest(event_id="fp-1", document_id="fp", owner="routing", status="new",
                            due_at=due, correlation_id="c-1",
                            data={"amount": 12.5, "note": "tab\t é",
                                  "lines": [1, 1e-07]})  # fmt: skip
    try:
        for store in (postgres, dynamo_store):
            store.add_service(t, "routing")
            assert isinstance(store.send(store.add_service(t, "intake", can_create=True),
                                         request), Receipt)  # fmt: skip
    finally:
        postgres.close()
    row = admin.execute("SELECT fingerprint FROM handoff.receipts "
                        "WHERE tenant_id = %s AND event_id = 'fp-1'", (t,)).fetchone()  # fmt: skip
    item = dynamo_store._get(k.receipt_pk(t, "fp-1"), "RECEIPT")
    assert row is not None and item is not None
    assert bytes(item["fingerprint"]) == bytes(row[0])
