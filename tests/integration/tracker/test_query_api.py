"""The query API against the real database, through a real ``handoff serve``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from handoff.core.client import HandoffClient
from handoff.core.errors import VersionMismatch
from handoff.core.identity import Credential
from tests.fix_contract import ServiceFactory


def eid() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def http(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=10) as client:
        yield client


def auth(credential: Credential) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential.token}"}


@pytest.fixture
def crew(service: ServiceFactory) -> dict[str, Credential]:
    return {
        "routing": service("routing", can_create=True),
        "review": service("review"),
        "finalization": service("finalization"),
    }


@pytest.fixture
def routing(crew: dict[str, Credential], migrated: Any) -> Iterator[HandoffClient]:
    with HandoffClient.direct(crew["routing"], migrated.database_url, pool_size=1) as client:
        yield client


def test_document_detail_and_history(
    http: httpx.Client, crew: dict[str, Credential], routing: HandoffClient
) -> None:
    due = datetime.now(UTC) + timedelta(hours=1)
    routing.create(event_id=eid(), document_id="invoice-42", owner="routing", status="new")
    routing.emit(
        event_id=eid(),
        event_type="routed",
        document_id="invoice-42",
        next_owner="review",
        status="waiting for review",
        expected_version=1,
        due_at=due,
        data={"amount": 12},
    )
    got = http.get("/v1/documents/invoice-42", headers=auth(crew["review"]))
    assert got.status_code == 200
    body = got.json()
    assert body["owner"] == "review"
    assert body["status"] == "waiting for review"
    assert body["version"] == 2
    assert body["runId"] == 1
    assert body["data"] == {"amount": 12}
    assert body["overdue"] is False
    assert datetime.fromisoformat(body["dueAt"]) == due

    history = http.get("/v1/documents/invoice-42/history", headers=auth(crew["review"])).json()
    assert [h["version"] for h in history["items"]] == [1, 2]
    assert [(h["ownerBefore"], h["ownerAfter"]) for h in history["items"]] == [
        (None, "routing"),
        ("routing", "review"),
    ]
    assert history["next"] is None

    first = http.get(
        "/v1/documents/invoice-42/history", params={"limit": 1}, headers=auth(crew["review"])
    ).json()
    assert [h["version"] for h in first["items"]] == [1]
    rest = http.get(
        "/v1/documents/invoice-42/history",
        params={"limit": 1, "after": first["next"]},
        headers=auth(crew["review"]),
    ).json()
    assert [h["version"] for h in rest["items"]] == [2]


def test_unknown_document_is_404_with_a_code(
    http: httpx.Client, crew: dict[str, Credential]
) -> None:
    for path in ("/v1/documents/nope", "/v1/documents/nope/history"):
        got = http.get(path, headers=auth(crew["routing"]))
        assert got.status_code == 404
        assert got.json()["code"] == "DocumentNotFound"


def test_owner_pages_oldest_assignment_first_with_keyset_cursor(
    http: httpx.Client, crew: dict[str, Credential], routing: HandoffClient
) -> None:
    ids = [f"doc-{i:02d}" for i in range(7)]
    for doc in ids:
        routing.create(event_id=eid(), document_id=doc, owner="routing", status="new")
    # Handing one away and back makes it the newest assignment.
    routing.emit(
        event_id=eid(),
        event_type="routed",
        document_id="doc-00",
        next_owner="review",
        status="s",
        expected_version=1,
    )
    with HandoffClient.direct(crew["review"], pool_size=1) as review:
        review.emit(
            event_id=eid(),
            event_type="back",
            document_id="doc-00",
            next_owner="routing",
            status="s",
            expected_version=2,
        )
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3} | ({"after": after} if after else {})
        page = http.get(
            "/v1/owners/routing/documents", params=params, headers=auth(crew["review"])
        ).json()
        seen += [d["documentId"] for d in page["items"]]
        pages += 1
        after = page["next"]
        if after is None:
            break
    assert seen == [*ids[1:], "doc-00"]
    assert pages == 3


def test_overdue_is_strictly_before_now_earliest_first(
    http: httpx.Client, crew: dict[str, Credential], routing: HandoffClient
) -> None:
    now = datetime.now(UTC)
    dues = {
        "late-2h": now - timedelta(hours=2),
        "late-5m": now - timedelta(minutes=5),
        "late-3d": now - timedelta(days=3),
        "later": now + timedelta(hours=1),
    }
    for doc, due in dues.items():
        routing.create(event_id=eid(), document_id=doc, owner="routing", status="new", due_at=due)
    routing.create(event_id=eid(), document_id="no-deadline", owner="routing", status="new")
    page = http.get("/v1/owners/routing/overdue", headers=auth(crew["routing"])).json()
    assert [d["documentId"] for d in page["items"]] == ["late-3d", "late-2h", "late-5m"]
    assert all(d["overdue"] for d in page["items"])
    two = http.get(
        "/v1/owners/routing/overdue", params={"limit": 2}, headers=auth(crew["routing"])
    ).json()
    rest = http.get(
        "/v1/owners/routing/overdue",
        params={"limit": 2, "after": two["next"]},
        headers=auth(crew["routing"]),
    ).json()
    assert [d["documentId"] for d in two["items"] + rest["items"]] == [
        "late-3d",
        "late-2h",
        "late-5m",
    ]
    assert rest["next"] is None


def test_owner_counts_snapshot(
    http: httpx.Client, crew: dict[str, Credential], routing: HandoffClient
) -> None:
    now = datetime.now(UTC)
    for i in range(5):
        routing.create(
            event_id=eid(),
            document_id=f"d{i}",
            owner="routing",
            status="new",
            due_at=now - timedelta(hours=i) if i % 2 else now + timedelta(hours=1),
        )
    for i in range(3):
        routing.emit(
            event_id=eid(),
            event_type="routed",
            document_id=f"d{i}",
            next_owner="review",
            status="s",
            expected_version=1,
            due_at=now - timedelta(minutes=1) if i == 0 else None,
        )
    with HandoffClient.direct(crew["review"], pool_size=1) as review:
        review.emit(  # finished: leaves every count
            event_id=eid(),
            event_type="done",
            document_id="d2",
            next_owner=None,
            status="done",
            expected_version=2,
        )
    got = http.get("/v1/owners", headers=auth(crew["finalization"]))
    assert got.status_code == 200
    snapshot = got.json()
    owners = {o["owner"]: o for o in snapshot["owners"]}
    # routing keeps d3 (overdue 3h) and d4 (due in 1h); review has d0 (overdue) and d1.
    assert owners["routing"]["assigned"] == 2
    assert owners["routing"]["overdue"] == 1
    assert owners["review"]["assigned"] == 2
    assert owners["review"]["overdue"] == 1
    assert set(owners) == {"routing", "review"}
    as_of = datetime.fromisoformat(snapshot["asOf"])
    assert datetime.fromisoformat(owners["routing"]["oldestAssignedAt"]) <= as_of


def test_rejections_newest_first_and_by_document(
    http: httpx.Client, crew: dict[str, Credential], routing: HandoffClient
) -> None:
    routing.create(event_id=eid(), document_id="r1", owner="routing", status="new")
    routing.create(event_id=eid(), document_id="r2", owner="routing", status="new")
    for doc in ("r1", "r2", "r1"):
        with pytest.raises(VersionMismatch):
            routing.emit(
                event_id=eid(),
                event_type="x",
                document_id=doc,
                next_owner="review",
                status="s",
                expected_version=9,
            )
    everything = http.get("/v1/rejections", headers=auth(crew["review"])).json()
    assert [r["documentId"] for r in everything["items"]] == ["r1", "r2", "r1"]
    assert {r["code"] for r in everything["items"]} == {"VersionMismatch"}
    assert everything["items"][0]["currentVersion"] == 1
    mine = http.get(
        "/v1/rejections", params={"documentId": "r1", "limit": 1}, headers=auth(crew["review"])
    ).json()
    assert len(mine["items"]) == 1 and mine["next"]
    older = http.get(
        "/v1/rejections",
        params={"documentId": "r1", "limit": 1, "after": mine["next"]},
        headers=auth(crew["review"]),
    ).json()
    assert older["items"][0]["id"] < mine["items"][0]["id"]
    assert older["items"][0]["documentId"] == "r1"


def test_a_credential_sees_only_its_tenant(
    http: httpx.Client, crew: dict[str, Credential], routing: HandoffClient, service: ServiceFactory
) -> None:
    routing.create(event_id=eid(), document_id="secret-doc", owner="routing", status="new")
    outsider = service("routing", in_tenant=f"other-{uuid.uuid4().hex[:8]}")
    assert http.get("/v1/documents/secret-doc", headers=auth(outsider)).status_code == 404
    assert http.get("/v1/owners", headers=auth(outsider)).json()["owners"] == []
    page = http.get("/v1/owners/routing/documents", headers=auth(outsider)).json()
    assert page["items"] == []
    assert http.get("/v1/owners", headers=auth(crew["routing"])).json()["owners"] != []


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/v1/owners/routing/documents", {"limit": 501}, 422, "InvalidRequest"),
        ("/v1/owners/routing/documents", {"limit": 0}, 422, "InvalidRequest"),
        ("/v1/owners/routing/documents", {"after": "not-a-cursor!"}, 422, "InvalidRequest"),
        ("/v1/owners/routing/overdue", {"after": "WzFd"}, 422, "InvalidRequest"),
        ("/v1/owners/Not%20A%20Name/documents", {}, 422, "InvalidRequest"),
        ("/v1/documents/x/history", {"runId": 0}, 422, "InvalidRequest"),
        ("/v1/rejections", {"after": "e30"}, 422, "InvalidRequest"),
    ],
)
def test_bad_parameters_are_422_with_a_code(
    http: httpx.Client,
    crew: dict[str, Credential],
    path: str,
    params: dict[str, Any],
    status: int,
    code: str,
) -> None:
    got = http.get(path, params=params, headers=auth(crew["routing"]))
    assert got.status_code == status, got.text
    assert got.json()["code"] == code
    assert got.json()["message"]


def test_reads_need_a_known_credential(http: httpx.Client) -> None:
    missing = http.get("/v1/owners")
    assert missing.status_code == 401
    assert missing.json()["code"] == "Unauthenticated"
    unknown = http.get("/v1/owners", headers=auth(Credential.new()))
    assert unknown.status_code == 401
    assert unknown.json()["code"] == "Unauthenticated"
    garbled = http.get("/v1/owners", headers={"Authorization": "Bearer nonsense"})
    assert garbled.status_code == 401


def test_openapi_documents_the_query_api(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    for path in (
        "/v1/documents/{document_id}",
        "/v1/documents/{document_id}/history",
        "/v1/owners",
        "/v1/owners/{owner}/documents",
        "/v1/owners/{owner}/overdue",
        "/v1/rejections",
    ):
        assert "get" in spec["paths"][path], path


def test_counts_agree_with_a_full_scan_after_random_work(
    http: httpx.Client,
    crew: dict[str, Credential],
    routing: HandoffClient,
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    """Invariant: the O(owners) counts equal GROUP BY over the state table."""
    import random

    rng = random.Random(7)
    now = datetime.now(UTC)
    owners = ["routing", "review", "finalization"]
    clients = {o: HandoffClient.direct(crew[o], pool_size=1) for o in owners}
    state: dict[str, tuple[str, int]] = {}
    try:
        for i in range(60):
            doc = f"w{i}"
            due = now + timedelta(minutes=rng.randint(-600, 600)) if rng.random() < 0.8 else None
            routing.create(event_id=eid(), document_id=doc, owner="routing", status="n", due_at=due)
            state[doc] = ("routing", 1)
        for _ in range(150):
            doc = rng.choice(sorted(state))
            owner, version = state[doc]
            if owner is None:
                continue
            nxt = rng.choice([*owners, None])
            due = now + timedelta(minutes=rng.randint(-600, 600)) if rng.random() < 0.7 else None
            clients[owner].emit(
                event_id=eid(),
                event_type="step",
                document_id=doc,
                next_owner=nxt,
                status="done" if nxt is None else "s",
                expected_version=version,
                due_at=due,
            )
            state[doc] = (nxt, version + 1)  # type: ignore[assignment]
    finally:
        for c in clients.values():
            c.close()
    expected = {
        owner: (int(assigned), int(overdue))
        for owner, assigned, overdue in admin.execute(
            "SELECT owner, count(*), count(*) FILTER (WHERE due_at < now()) "
            "FROM handoff.document_state WHERE tenant_id = %s AND owner IS NOT NULL "
            "GROUP BY owner",
            (tenant,),
        ).fetchall()
    }
    got = http.get("/v1/owners", headers=auth(crew["routing"])).json()["owners"]
    assert {o["owner"]: (o["assigned"], o["overdue"]) for o in got} == expected
    admin.execute("SELECT handoff.fold_due_counts()")
    again = http.get("/v1/owners", headers=auth(crew["routing"])).json()["owners"]
    assert {o["owner"]: (o["assigned"], o["overdue"]) for o in again} == expected
