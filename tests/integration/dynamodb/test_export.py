"""``handoff export dynamodb``: a PostgreSQL tenant ported into a fresh table of the AWS
design (moto's server), read back through the DynamoDB store as PostgreSQL reads it, and
carried on there with the services' own credentials; a stopped export resumes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from handoff.core.errors import Unauthenticated
from handoff.core.models import CreateRequest, HandoffRequest, Receipt, Rejection, StartRunRequest
from handoff.core.services import revoke_service
from handoff.core.settings import HandoffSettings
from handoff.core.store import PostgresStore
from handoff.dynamo import schema as k
from handoff.dynamo.exporting import Exported, export_table
from handoff.dynamo.store import DynamoStore
from handoff.stack.dynamodb import client

DOCUMENTS = 240


class Stop(Exception):
    pass


def _handoff(doc: str, to: str | None, version: int, data: dict[str, Any] | None = None,
             event_id: str | None = None) -> HandoffRequest:  # fmt: skip
    return HandoffRequest(event_id=event_id or f"{doc}-{version}", event_type="moved",
                          document_id=doc, next_owner=to, status=f"at {to}",
                          expected_version=version, data=data)  # fmt: skip


@pytest.fixture
def source(migrated: HandoffSettings) -> Any:
    """A tenant in PostgreSQL: documents at each stage, finished ones, a second run,
    deadlines, data merged over changes, and a rejection."""
    pg = PostgresStore(migrated.database_url)
    t = f"x-{uuid.uuid4().hex[:8]}"
    intake = pg.add_service(t, "intake", can_create=True)
    routing, review = pg.add_service(t, "routing"), pg.add_service(t, "review")
    due = datetime.now(UTC) - timedelta(hours=1)
    for i in range(DOCUMENTS):
        doc = f"inv-{i:04d}"
        created = pg.send(intake, CreateRequest(
            event_id=f"{doc}-c", document_id=doc, owner="routing", status="new",
            due_at=due if i % 7 == 0 else None, data={"amount": i, "note": "é\t"}))  # fmt: skip
        assert isinstance(created, Receipt)
        if i % 3:
            assert isinstance(pg.send(routing, _handoff(doc, "review", 1, {"route": "eu"})),
                              Receipt)  # fmt: skip
        if i % 3 == 2:
            assert isinstance(pg.send(review, _handoff(doc, None, 2, {"ok": True})), Receipt)
    again = StartRunRequest(event_id="again", owner="routing", status="new")
    assert isinstance(pg.send(intake, again, "inv-0002"), Receipt)
    assert isinstance(pg.send(routing, _handoff("inv-0000", "review", 7)), Rejection)
    gone = pg.add_service(t, "archive")
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        revoke_service(conn, "archive", tenant=t)
    yield t, pg, {"intake": intake, "routing": routing, "review": review, "archive": gone}
    pg.close()


def test_a_tenant_is_exported_read_alike_and_carried_on(
    source: tuple[str, PostgresStore, dict[str, Any]], migrated: HandoffSettings,
    dynamo_url: str,
) -> None:  # fmt: skip
    t, pg, creds = source
    table = f"export-{uuid.uuid4().hex[:8]}"
    db = client(dynamo_url)
    seen: list[Exported] = []

    def stop_after_two_pages(found: Exported) -> None:
        seen.append(found)
        if found.states >= 100:
            raise Stop

    with pytest.raises(Stop):
        export_table(db, migrated.database_url, table, tenants=[t], page=50,
                     progress=stop_after_two_pages)  # fmt: skip
    twin = DynamoStore(db, table)
    assert twin.document(t, "inv-0001") is not None and twin.document(t, "inv-0230") is None
    # Resumed by the command itself.
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "export", "dynamodb", "--table", table,
         "--tenant", t],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "HANDOFF_DYNAMODB_URL": dynamo_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "resumed a stopped export" in said and "0 service(s)" in said, said
    # A revoked service stays registered (it may own work) but cannot sign in.
    assert twin._get(k.services_pk(t), "SERVICE#archive") is not None
    with pytest.raises(Unauthenticated):
        twin.send(creds["archive"], _handoff("inv-0001", "review", 2))
    assert "1 rejection(s)" in said and "50 sampled document(s)" in said, said
    # Read back through the DynamoDB store as through PostgreSQL's.
    assert twin.owner_counts(t) == pg.owner_counts(t) == {"review": 80, "routing": 81}
    for doc in ("inv-0000", "inv-0001", "inv-0002", "inv-0239"):
        for run in (1, 2) if doc == "inv-0002" else (1,):
            assert twin.document(t, doc, run) == pg.document(t, doc, run)
            steps = [(h["version"], h["owner"], h["previousOwner"], h["status"], h["source"])
                     for h in twin.history(t, doc, run)]  # fmt: skip
            assert steps == [(h["version"], h["owner"], h["previousOwner"], h["status"],
                              h["source"]) for h in pg.history(t, doc, run)]  # fmt: skip
    # Each event carries the state's data at its version, as the relay's does.
    events = twin.history(t, "inv-0002", 1)
    assert [e["data"] for e in events] == [
        {"amount": 2, "note": "é\t"}, {"amount": 2, "note": "é\t", "route": "eu"},
        {"amount": 2, "note": "é\t", "route": "eu", "ok": True}]  # fmt: skip
    assert twin.history(t, "inv-0002", 2)[0]["data"] == {}
    for overdue in (False, True):
        assert twin.owner_documents(t, "routing", overdue=overdue) == pg.owner_documents(
            t, "routing", overdue=overdue)  # fmt: skip
    assert [r["code"] for r in twin.rejections(t)] == ["VersionMismatch"]
    # A tenant named by mistake is an error, not an empty success.
    typo = export_table(db, migrated.database_url, table, tenants=[t + "-typo"])
    assert typo.problems == [f"tenant {t}-typo: no services or documents to export"]
    # Carried on in DynamoDB with the credentials PostgreSQL issued.
    try:
        _carry_on(twin, t, creds)
    finally:
        db.delete_table(TableName=table)  # moto keeps it in memory


def _carry_on(twin: DynamoStore, t: str, creds: dict[str, Any]) -> None:
    moved = twin.send(creds["review"], _handoff("inv-0001", None, 2, {"ok": True}))
    assert isinstance(moved, Receipt) and moved.version == 3
    again = twin.send(creds["routing"], _handoff("inv-0001", "review", 1, {"route": "eu"}))
    assert isinstance(again, Receipt) and again.replayed and again.version == 2
    reused = twin.send(creds["routing"], _handoff("inv-0001", "review", 1, {"route": "us"},
                                                  event_id="inv-0001-1"))  # fmt: skip
    assert isinstance(reused, Rejection) and reused.code == "ConflictingEventReuse"
