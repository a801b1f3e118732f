"""The invoice-42 story of the issue, on both backends (direct SQL role and HTTP)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from handoff.core import errors
from tests.fix_contract import ClientFactory, ServiceFactory, counts


def eid() -> str:
    return str(uuid.uuid4())


def test_invoice_42(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    routing = connect(service("routing", can_create=True))
    review = connect(service("review"))
    service("finalization")  # registered: the next owner is a real service

    first = routing.create(event_id=eid(), document_id="invoice-42", owner="routing", status="new")
    assert (first.version, first.owner, first.run_id, first.replayed) == (1, "routing", 1, False)
    routing.emit(
        event_id=eid(),
        event_type="routed",
        document_id="invoice-42",
        next_owner="review",
        status="in-review",
        expected_version=1,
    )
    assigned_to_review = _state(admin, tenant)["assigned_at"]
    for version in range(2, 7):  # review works on it: progress keeps the assignment
        review.emit(
            event_id=eid(),
            event_type="annotated",
            document_id="invoice-42",
            next_owner="review",
            status="in-review",
            expected_version=version,
            data={"note": f"check {version}"},
        )
    held = _state(admin, tenant)
    assert (held["owner"], held["version"]) == ("review", 7)
    assert held["assigned_at"] == assigned_to_review
    assert counts(admin, tenant) == {"review": 1}

    # review approves: version 8, owned by finalization
    approve = {
        "event_id": eid(),
        "event_type": "approved",
        "document_id": "invoice-42",
        "next_owner": "finalization",
        "status": "approved",
        "expected_version": 7,
        "data": {"approvedBy": "alice"},
    }
    receipt = review.emit(**approve)
    assert (receipt.version, receipt.owner, receipt.replayed) == (8, "finalization", False)
    assert _state(admin, tenant)["assigned_at"] > assigned_to_review

    # a stale retry with a new event id is rejected, with what the caller may see
    with pytest.raises(errors.OwnershipMismatch) as stale:
        review.emit(**{**approve, "event_id": eid()})
    assert (stale.value.current_owner, stale.value.current_version) == ("finalization", 8)

    # the identical retry returns the version-8 receipt although ownership moved
    again = review.emit(**approve)
    assert again.replayed
    assert again.model_dump() == receipt.model_dump()

    # the same event id with other content is rejected
    with pytest.raises(errors.ConflictingEventReuse):
        review.emit(**{**approve, "status": "approved-twice"})

    assert counts(admin, tenant) == {"finalization": 1}
    history = admin.execute(
        "SELECT version, owner_before, owner_after FROM handoff.document_history "
        "WHERE tenant_id = %s AND document_id = 'invoice-42' ORDER BY version",
        (tenant,),
    ).fetchall()
    assert [v for v, _, _ in history] == list(range(1, 9))
    assert history[1][1:] == ("routing", "review") and history[7][1:] == ("review", "finalization")
    outbox = admin.execute(
        "SELECT version FROM handoff.outbox WHERE tenant_id = %s ORDER BY version", (tenant,)
    ).fetchall()
    assert [v for (v,) in outbox] == list(range(1, 9))
    codes = admin.execute(
        "SELECT code FROM handoff.rejections WHERE tenant_id = %s ORDER BY id", (tenant,)
    ).fetchall()
    assert [c for (c,) in codes] == ["OwnershipMismatch", "ConflictingEventReuse"]


def test_completion_and_a_new_run(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    intake = connect(service("intake", can_create=True))
    intake.create(event_id=eid(), document_id="order-7", owner="intake", status="new")
    with pytest.raises(errors.RunInProgress):
        intake.start_run(event_id=eid(), document_id="order-7", owner="intake", status="again")
    done = intake.emit(
        event_id=eid(),
        event_type="shipped",
        document_id="order-7",
        next_owner=None,
        status="shipped",
        expected_version=1,
    )
    assert done.owner is None and done.version == 2
    assert counts(admin, tenant) == {}
    with pytest.raises(errors.OwnershipMismatch):
        intake.emit(
            event_id=eid(),
            event_type="x",
            document_id="order-7",
            next_owner="intake",
            status="x",
            expected_version=2,
        )
    run2 = intake.start_run(event_id=eid(), document_id="order-7", owner="intake", status="redo")
    assert (run2.run_id, run2.version, run2.owner) == (2, 1, "intake")
    assert counts(admin, tenant) == {"intake": 1}
    progressed = intake.emit(
        event_id=eid(),
        event_type="picked",
        document_id="order-7",
        next_owner="intake",
        status="picking",
        expected_version=1,
    )
    assert (progressed.run_id, progressed.version) == (2, 2)


def test_rules_of_creation(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    creator = connect(service("creator", can_create=True))
    plain = connect(service("plain"))
    with pytest.raises(errors.NotPermitted):
        plain.create(event_id=eid(), document_id="d1", owner="plain", status="new")
    creator.create(event_id=eid(), document_id="d1", owner="plain", status="new")
    with pytest.raises(errors.AlreadyExists) as exists:
        creator.create(event_id=eid(), document_id="d1", owner="creator", status="new")
    assert exists.value.current_owner == "plain" and exists.value.current_version == 1
    with pytest.raises(errors.DocumentNotFound):
        plain.emit(
            event_id=eid(),
            event_type="x",
            document_id="nope",
            next_owner="plain",
            status="x",
            expected_version=1,
        )
    with pytest.raises(errors.VersionMismatch) as mismatch:
        plain.emit(
            event_id=eid(),
            event_type="x",
            document_id="d1",
            next_owner="creator",
            status="x",
            expected_version=3,
        )
    assert mismatch.value.current_version == 1
    with pytest.raises(errors.SenderMismatch):
        plain.emit(
            event_id=eid(),
            event_type="x",
            document_id="d1",
            sender="creator",
            next_owner="creator",
            status="x",
            expected_version=1,
        )
    # rejections changed nothing
    assert counts(admin, tenant) == {"plain": 1}
    assert _state(admin, tenant, "d1")["version"] == 1
    outbox = admin.execute("SELECT count(*) FROM handoff.outbox WHERE tenant_id = %s", (tenant,))
    assert outbox.fetchone() == (1,)


def test_tenants_are_isolated(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    here = connect(service("maker", can_create=True))
    elsewhere = connect(service("maker", can_create=True, in_tenant=f"{tenant}-b"))
    here.create(event_id="shared-id", document_id="doc", owner="maker", status="new")
    # same document id and event id in another tenant: a separate document
    other = elsewhere.create(event_id="shared-id", document_id="doc", owner="maker", status="x")
    assert other.version == 1 and not other.replayed
    assert counts(admin, tenant) == {"maker": 1}


def _state(admin: psycopg.Connection[Any], tenant: str, doc: str = "invoice-42") -> dict[str, Any]:
    with admin.cursor(row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM handoff.document_state WHERE tenant_id = %s AND document_id = %s "
            "ORDER BY run_id DESC LIMIT 1",
            (tenant, doc),
        ).fetchone()
    assert row is not None
    return row
