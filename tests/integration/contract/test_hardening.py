"""What the contract refuses, at every entry point: out-of-range instants, names
outside the naming rule, owners that are not services, loose JSON types; and
how it answers: codes and messages for clients, database text only in the log."""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest

from handoff.core.client import HandoffClient
from handoff.core.db import SHARD_MOVED, translated
from handoff.core.errors import InvalidRequest, TransientConflict, UnknownOwner
from handoff.core.names import forbidden
from handoff.core.settings import HandoffSettings
from handoff.core.tx import HandoffTx, transact
from handoff.stack.local import LocalStack
from tests.fix_contract import ServiceFactory, counts, login, post

ARGS = "%s, %s, %s, %s, NULL, %s, %s, %s, %s, %s, NULL, NULL, NULL"

# Each was accepted before, and broke a read, an owner or a path.
BAD_INSTANTS = (
    "0001-01-01T00:00:00+14:00",  # year 0 in UTC: reads said "timestamp too small"
    "9999-12-31T23:00:00-14:00",  # year 10000 in UTC
    "0001-01-01T00:00:00Z",  # a Python consumer in a zone west of UTC cannot hold it
    "9999-12-31T12:00:00Z",
)
BAD_IDS = (
    "nl-1\n",  # a regex's $ matched before the newline
    "tab\there",
    "a\u202eb",  # right-to-left override
    "zero\u200bwidth",
    "inv/1",  # could never be read: /v1/documents/inv%2F1 was a 404
    "has space",
    ".",
    "..",
    "e\u0301",  # not NFC
    "x" * 201,
    "private\ue000",
)
BAD_SERVICE_NAMES = ("aworker\n", "Review", "re view", "-lead", "a" * 64, "ü")


def create_body(**overrides: Any) -> dict[str, Any]:
    return {
        "eventId": str(uuid.uuid4()),
        "documentId": f"doc-{uuid.uuid4().hex[:8]}",
        "owner": "boss",
        "status": "new",
        **overrides,
    }


def test_out_of_range_instants_are_refused_at_every_entry_point(
    migrated: HandoffSettings, service: ServiceFactory, api_url: str, admin: Any, tenant: str
) -> None:
    boss = service("boss", can_create=True)
    for due in BAD_INSTANTS:
        answer = post(api_url, "/v1/documents", create_body(dueAt=due), boss.token)
        assert answer.status_code == 422, (due, answer.text)
        assert answer.json()["code"] == "InvalidRequest" and "dueAt" in answer.text
        with (
            HandoffClient.direct(boss, migrated.database_url, pool_size=1) as client,
            pytest.raises(InvalidRequest, match="between"),
        ):
            client.create(
                event_id="e", document_id="d", owner="boss", status="new",
                due_at=_parse(due),
            )  # fmt: skip
        # plain SQL as the service's own role: the database holds the same range
        with (
            login(migrated, boss.role, boss.secret) as conn,
            pytest.raises(psycopg.errors.DataError, match="dueAt must be between") as raised,
        ):
            conn.execute(
                f"SELECT handoff.emit_direct({ARGS})",
                ("create", "e-sql", "created", "d-sql", None, "boss", "new", None, due),
            )
        assert raised.value.sqlstate == "22H00"
    assert counts(admin, tenant) == {}


def _parse(text: str) -> Any:
    try:
        return datetime.fromisoformat(text)
    except ValueError:  # Python itself cannot hold it: send it as text through pydantic
        return text


def test_names_outside_the_rule_are_refused_at_every_entry_point(
    migrated: HandoffSettings, service: ServiceFactory, api_url: str, admin: Any, tenant: str
) -> None:
    boss = service("boss", can_create=True)
    with HandoffClient.direct(boss, migrated.database_url, pool_size=1) as client:
        for bad in BAD_IDS:
            for field in ("documentId", "eventId"):
                answer = post(api_url, "/v1/documents", create_body(**{field: bad}), boss.token)
                assert answer.status_code == 422, (bad, answer.text)
                assert answer.json()["code"] == "InvalidRequest"
            with pytest.raises(InvalidRequest):
                client.create(event_id="e", document_id=bad, owner="boss", status="new")
            with (
                login(migrated, boss.role, boss.secret) as conn,
                pytest.raises(psycopg.errors.DataError) as raised,
            ):
                conn.execute(
                    f"SELECT handoff.emit_direct({ARGS})",
                    ("create", "e-sql", "created", bad, None, "boss", "new", None, None),
                )  # fmt: skip
            assert raised.value.sqlstate == "22H00", bad
        for bad in BAD_SERVICE_NAMES:
            answer = post(api_url, "/v1/documents", create_body(owner=bad), boss.token)
            assert answer.status_code == 422 and answer.json()["code"] == "InvalidRequest", bad
            with pytest.raises(InvalidRequest):
                client.create(event_id="e", document_id="d", owner=bad, status="new")
        for status in (" padded", "line\nbreak", "bidi\u202e", "x" * 65):
            answer = post(api_url, "/v1/documents", create_body(status=status), boss.token)
            assert answer.status_code == 422, status
        # statuses are labels: inner spaces and '/' are fine
        fine = post(api_url, "/v1/documents", create_body(status="waiting for a/b"), boss.token)
        assert fine.status_code == 201, fine.text
    assert counts(admin, tenant) == {"boss": 1}
    # the database refuses such services even to an admin's plain INSERT
    with pytest.raises(psycopg.errors.CheckViolation):
        admin.execute(
            "INSERT INTO handoff.services (tenant_id, name, db_role, secret_hash) "
            "VALUES (%s, 'aworker\n', 'hsvc_000000000000', '\\x00')",
            (tenant,),
        )


def test_the_cli_refuses_names_outside_the_rule(local_stack: LocalStack, migrated: Any) -> None:
    for bad in ("aworker\n", "Bad"):
        done = subprocess.run(
            [sys.executable, "-m", "handoff.cli", "service", "add", bad, "--tenant", "t-cli"],
            env={**os.environ, "HANDOFF_HOME": str(local_stack.layout.home), "COLUMNS": "300"},
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done
        assert "InvalidRequest" in done.stderr and "a-z, 0-9" in done.stderr, done.stderr


def test_ids_with_any_script_and_url_characters_round_trip(
    migrated: HandoffSettings, service: ServiceFactory, api_url: str
) -> None:
    boss = service("boss", can_create=True)
    service("next")
    for document in ("請求書-42", "فاتورة-٤٢", "inv?x=1#frag", "100%", "emoji-🧾", "é-nfc"):
        with HandoffClient.http(api_url, boss) as client:
            client.create(
                event_id=f"c-{document}", document_id=document, owner="boss", status="new"
            )
            client.emit(
                event_id=f"h-{document}", event_type="handed", document_id=document,
                next_owner="next", status="handed", expected_version=1,
            )  # fmt: skip
        path = httpx.URL(api_url).copy_with(raw_path=b"/v1/documents/" + _quoted(document))
        answer = httpx.get(path, headers={"Authorization": f"Bearer {boss.token}"})
        assert answer.status_code == 200 and answer.json()["documentId"] == document


def _quoted(text: str) -> bytes:
    return quote(text, safe="").encode()


def test_the_database_rule_matches_the_python_rule_code_point_by_code_point(
    admin: psycopg.Connection[Any],
) -> None:
    # PostgreSQL text holds neither NUL nor surrogates; every other code point
    # is checked alone, as a one-character id.
    rows = admin.execute(
        "SELECT cp FROM generate_series(1, 1114111) cp "
        "WHERE cp NOT BETWEEN 55296 AND 57343 "
        "AND handoff._id_problem(chr(cp), 'id') IS NOT NULL AND chr(cp) NOT IN ('.')"
    ).fetchall()
    refused_by_db = {int(r[0]) for r in rows}
    refused_by_python = {
        cp
        for cp in range(1, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF and (forbidden(cp) or not _nfc_alone(cp))
    }
    assert refused_by_db == refused_by_python


def _nfc_alone(cp: int) -> bool:
    char = chr(cp)
    # Python 3.11 knows Unicode 14, PostgreSQL 18 Unicode 16: compare only
    # where both know the character.
    return unicodedata.category(char) == "Cn" or unicodedata.is_normalized("NFC", char)


def test_the_next_owner_must_be_a_service_of_the_tenant(
    migrated: HandoffSettings,
    service: ServiceFactory,
    api_url: str,
    admin: psycopg.Connection[Any],
    tenant: str,
) -> None:
    boss = service("boss", can_create=True)
    service("elsewhere", in_tenant=f"{tenant}-other")
    for owner in ("nobody", "elsewhere"):
        answer = post(api_url, "/v1/documents", create_body(owner=owner), boss.token)
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "UnknownOwner" and "service add" in answer.text
    created = post(api_url, "/v1/documents", create_body(documentId="inv-1"), boss.token)
    assert created.status_code == 201
    with (
        HandoffClient.direct(boss, migrated.database_url, pool_size=1) as client,
        pytest.raises(UnknownOwner),
    ):
        client.emit(
            event_id="typo", event_type="handed", document_id="inv-1",
            next_owner="reveiw", status="handed", expected_version=1,
        )  # fmt: skip
    recorded = admin.execute(
        "SELECT code, requested_owner FROM handoff.rejections WHERE tenant_id = %s ORDER BY id",
        (tenant,),
    ).fetchall()
    assert recorded == [
        ("UnknownOwner", "nobody"),
        ("UnknownOwner", "elsewhere"),
        ("UnknownOwner", "reveiw"),
    ]
    assert counts(admin, tenant) == {"boss": 1}


def test_strict_json_types(service: ServiceFactory, api_url: str) -> None:
    boss = service("boss", can_create=True)
    assert post(api_url, "/v1/documents", create_body(documentId="inv-1"), boss.token).is_success
    base = {
        "eventId": "e-strict",
        "eventType": "progress",
        "documentId": "inv-1",
        "nextOwner": "boss",
        "status": "working",
        "expectedVersion": 1,
    }
    for loose in (
        {"expectedVersion": "1"},
        {"expectedVersion": True},
        {"expectedVersion": 1.0},
        {"runId": "1"},
        {"dueAt": 1000000000000},
        {"dueAt": 1.5},
        {"status": 5},
        {"documentId": 42},
        {"data": "{}"},
    ):
        answer = post(api_url, "/v1/handoffs", {**base, **loose}, boss.token)
        assert answer.status_code == 422, (loose, answer.text)
        assert answer.json()["code"] == "InvalidRequest"
    assert post(api_url, "/v1/handoffs", base, boss.token).status_code == 201


def test_error_bodies_carry_a_request_id_and_no_database_text(
    service: ServiceFactory, api_url: str, admin: psycopg.Connection[Any]
) -> None:
    boss = service("boss", can_create=True)
    for data in ({"note": "nul\u0000inside"}, {"deep": _nested(40)}):
        answer = post(api_url, "/v1/documents", create_body(data=data), boss.token)
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert body["code"] == "InvalidRequest" and body["requestId"]
        assert answer.headers["x-request-id"] == body["requestId"]
        for database_text in ("CONTEXT", "DETAIL", "portal", "$", "psycopg"):
            assert database_text not in body["message"], body
    # NaN is not JSON, but Python's json module writes it
    raw = httpx.post(
        api_url + "/v1/documents",
        content=b'{"eventId": "e", "documentId": "d", "owner": "boss", "status": "s", '
        b'"data": {"x": NaN}}',
        headers={"Authorization": f"Bearer {boss.token}", "Content-Type": "application/json"},
    )
    assert raw.status_code == 422 and raw.json()["code"] == "InvalidRequest", raw.text
    # a client's own request id is kept, for correlation with its logs
    mine = post(api_url, "/v1/documents", create_body(owner="x y"), boss.token, **{
        "X-Request-Id": "client-42"})  # fmt: skip
    assert mine.headers["x-request-id"] == "client-42" and mine.json()["requestId"] == "client-42"
    # what the database says stays on the cause, for the log
    with pytest.raises(InvalidRequest) as raised, translated():
        admin.execute("SELECT %s::int", ("not a number",))
    assert "invalid input syntax" not in str(raised.value)
    assert "invalid input syntax" in str(raised.value.__cause__)


def _internal_error(message: str) -> str:
    """A statement PostgreSQL fails with SQLSTATE XX000 and ``message``, as Citus does."""
    return f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'XX000', MESSAGE = '{message}'; END $$"


def test_a_call_refused_because_its_shard_moved_is_retried_and_no_other_internal_error(
    admin: psycopg.Connection[Any],
) -> None:
    """Citus refuses a delegated call that reached a worker its tenant's shard had just
    left (a move under load): the unit rolled back, and the same unit again goes to
    the new worker. Raised here by PostgreSQL itself with Citus's SQLSTATE and text."""
    with pytest.raises(TransientConflict) as raised, translated():
        admin.execute(_internal_error(SHARD_MOVED))
    assert "shard moved" in str(raised.value)
    with pytest.raises(psycopg.errors.InternalError_), translated():
        admin.execute(_internal_error("could not open relation with OID 1"))

    calls: list[int] = []

    def unit(tx: HandoffTx) -> int:
        calls.append(1)
        if len(calls) == 1:
            tx.execute(_internal_error(SHARD_MOVED))
        return int(tx.execute("SELECT 7").fetchone()[0])  # type: ignore[index]

    assert transact(admin, unit) == 7 and len(calls) == 2


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": value}
    return value


def test_docs_load_without_a_network(api_url: str) -> None:
    page = httpx.get(api_url + "/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/static-offline-docs/{asset}" in page.text
        assert httpx.get(f"{api_url}/static-offline-docs/{asset}").status_code == 200
    redoc = httpx.get(api_url + "/redoc")
    assert redoc.status_code == 200 and "https://" not in redoc.text


def test_every_privileged_function_pins_its_search_path_and_is_closed_to_public(
    admin: psycopg.Connection[Any],
) -> None:
    """SECURITY DEFINER runs as the schema's owner: a function that took the caller's
    search_path could be made to call the caller's objects, and PUBLIC must not run any."""
    rows = admin.execute(
        "SELECT p.proname::text, coalesce(array_to_string(p.proconfig, ','), ''),"
        "       has_function_privilege('public', p.oid, 'EXECUTE')"
        "  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'handoff' AND p.prosecdef"
    ).fetchall()
    assert len(rows) >= 10  # emit_direct, the consumer and effect functions, ...
    assert "consumer_claim" in {name for name, _, _ in rows}
    unpinned = [name for name, config, _ in rows if "search_path=" not in config]
    assert not unpinned, f"SECURITY DEFINER without SET search_path: {unpinned}"
    open_to_public = [name for name, _, public in rows if public]
    assert not open_to_public, f"PUBLIC may execute: {open_to_public}"
