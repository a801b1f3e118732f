"""Identity: no service can emit as another, over HTTP or with plain SQL."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import psycopg
import pytest

from handoff.core.settings import HandoffSettings
from tests.fix_contract import ServiceFactory, counts, login, post

ARGS = "%s, %s, %s, %s, NULL, %s, %s, %s, %s, NULL, NULL, NULL, NULL"


def test_plain_sql_cannot_bypass_the_contract(
    migrated: HandoffSettings, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    boss = service("boss", can_create=True)
    mallory = service("mallory")
    with login(migrated, boss.role, boss.secret) as conn:
        conn.execute(
            f"SELECT handoff.emit_direct({ARGS})",
            ("create", "e1", "created", "doc", None, "boss", "new", None),
        )
    with login(migrated, mallory.role, mallory.secret) as conn:
        for statement in (
            "SELECT * FROM handoff.document_state",
            "UPDATE handoff.document_state SET owner = 'mallory'",
            "INSERT INTO handoff.outbox (tenant_id, document_id, run_id, version, event_id, "
            "event_type, payload) VALUES ('x', 'x', 1, 1, 'x', 'x', '{}')",
            f"SELECT handoff._emit('{tenant}', 'boss', true, 'handoff', NULL, 'e', 't', 'doc', "
            "NULL, 'mallory', 's', 1, NULL, NULL, NULL, NULL)",
            "SELECT handoff.emit_http('x', '\\x00', 'create', 'e', 't', 'd', NULL, NULL, 'o', "
            "'s', NULL, NULL, NULL, NULL, NULL)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        # claiming to be boss through the only door open to it: refused and recorded
        answer = conn.execute(
            f"SELECT handoff.emit_direct({ARGS})",
            ("handoff", "e2", "stolen", "doc", "boss", "mallory", "mine", 1),
        ).fetchone()
        assert answer is not None and answer[0]["code"] == "SenderMismatch"
        # and as itself it is simply not the owner
        answer = conn.execute(
            f"SELECT handoff.emit_direct({ARGS})",
            ("handoff", "e3", "stolen", "doc", None, "mallory", "mine", 1),
        ).fetchone()
        assert answer is not None and answer[0]["code"] == "OwnershipMismatch"
    assert counts(admin, tenant) == {"boss": 1}


def test_a_role_that_is_no_service_is_refused(
    migrated: HandoffSettings, admin: psycopg.Connection[Any]
) -> None:
    with pytest.raises(
        psycopg.errors.InvalidAuthorizationSpecification, match="not an active Handoff service"
    ):
        admin.execute(
            f"SELECT handoff.emit_direct({ARGS})",
            ("create", "e1", "created", "doc", None, "x", "new", None),
        )


def test_a_wrong_password_cannot_log_in(migrated: HandoffSettings, service: ServiceFactory) -> None:
    cred = service("victim")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        login(migrated, cred.role, "guess" + cred.secret[5:])


def test_http_status_codes_and_bodies(api_url: str, service: ServiceFactory) -> None:
    boss = service("boss", can_create=True).token
    other = service("other").token
    create = {"eventId": str(uuid.uuid4()), "documentId": "inv-1", "owner": "boss", "status": "new"}

    no_auth = post(api_url, "/v1/documents", create)
    assert no_auth.status_code == 401 and no_auth.json()["code"] == "Unauthenticated"
    assert no_auth.headers["WWW-Authenticate"] == "Bearer"
    assert post(api_url, "/v1/documents", create, "garbage").status_code == 401
    forged = boss.split(".")[0] + "." + "A" * 43
    assert post(api_url, "/v1/documents", create, forged).json()["code"] == "Unauthenticated"

    first = post(api_url, "/v1/documents", create, boss)
    assert first.status_code == 201, first.text
    assert set(first.json()) == {
        "eventId", "documentId", "runId", "version", "owner", "status", "acceptedAt"
    }  # fmt: skip
    retry = post(api_url, "/v1/documents", create, boss)
    assert (retry.status_code, retry.json()) == (200, first.json())

    bad = post(
        api_url, "/v1/documents", {**create, "owner": "Not A Name", "dueAt": "tomorrow"}, boss
    )
    assert bad.status_code == 422 and bad.json()["code"] == "InvalidRequest"
    assert {p["field"] for p in bad.json()["problems"]} == {"owner", "dueAt"}
    naive = post(api_url, "/v1/documents", {**create, "dueAt": "2026-12-01T09:00:00"}, boss)
    assert naive.status_code == 422 and "time zone" in naive.text

    handoff = {
        "eventId": str(uuid.uuid4()),
        "eventType": "approved",
        "documentId": "inv-1",
        "sender": "boss",
        "nextOwner": "other",
        "status": "approved",
        "expectedVersion": 5,
    }
    stale = post(api_url, "/v1/handoffs", handoff, boss)
    assert stale.status_code == 409
    assert stale.json() | {"message": "", "requestId": ""} == {
        "code": "VersionMismatch",
        "message": "",
        "requestId": "",
        "currentVersion": 1,
        "currentOwner": "boss",
    }
    as_boss = post(api_url, "/v1/handoffs", {**handoff, "expectedVersion": 1}, other)
    assert as_boss.status_code == 403 and as_boss.json()["code"] == "SenderMismatch"
    not_creator = post(
        api_url, "/v1/documents", {**create, "eventId": "x1", "owner": "other"}, other
    )
    assert not_creator.status_code == 403 and not_creator.json()["code"] == "NotPermitted"
    missing = post(api_url, "/v1/handoffs", {**handoff, "documentId": "nope"}, boss)
    assert missing.status_code == 404 and missing.json()["code"] == "DocumentNotFound"
    ok = post(api_url, "/v1/handoffs", {**handoff, "expectedVersion": 1}, boss)
    assert ok.status_code == 201 and ok.json()["owner"] == "other"
    extra = post(api_url, "/v1/handoffs", {**handoff, "surprise": 1}, boss)
    assert extra.status_code == 422
    unknown = httpx.get(f"{api_url}/v1/nothing-here", timeout=5)
    assert unknown.status_code == 404 and unknown.json()["code"] == "NotFound"
    not_json = httpx.post(
        f"{api_url}/v1/handoffs",
        content=b"{not json",
        headers={"Authorization": f"Bearer {boss}", "Content-Type": "application/json"},
        timeout=5,
    )
    assert not_json.status_code == 400 and json.loads(not_json.text)["code"] == "MalformedJson"
