"""``handoff import dynamodb``: a generated table of the AWS design (moto's server) ported into
PostgreSQL in parallel segments, verified (counts = states, versions gapless, receipts
intact), and resumed after an import stopped mid-way, with nothing written twice."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest

from handoff.core.micros import to_micros
from handoff.core.settings import HandoffSettings
from handoff.dynamo import items
from handoff.dynamo import schema as k
from handoff.dynamo.porting import import_table
from handoff.stack.dynamodb import client

# make test ports 5,000 documents (moto serves one request at a time, and generating
# 100,000 takes it minutes); HANDOFF_TEST_IMPORT_DOCUMENTS=100000 runs the size.
DOCUMENTS = int(os.environ.get("HANDOFF_TEST_IMPORT_DOCUMENTS", "5000"))


class Stop(Exception):
    pass


def _generate(db: Any, table: str, tenant: str, documents: int) -> None:
    """What the store writes for each document: created, then handed on once."""
    now = datetime.now(UTC)
    batch: list[dict[str, Any]] = []

    def put(values: dict[str, Any]) -> None:
        batch.append({"PutRequest": {"Item": items.to_item(values)}})
        if len(batch) == 25:  # BatchWriteItem takes 25 items
            flush()

    def flush() -> None:
        pending = {table: list(batch)}
        batch.clear()
        while pending:
            pending = db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}

    micros = to_micros(now)
    for i in range(documents):
        doc, owner = f"doc-{i}", f"owner-{i % 5}"
        at = k.stamp(now - timedelta(minutes=i % 600))
        data = {"n": i}
        put(items.state(tenant, doc, 1, 2, owner, "reviewing", assigned_at=at, due_at=None,
                        created_at=at, updated_at=at, completed_at=None,
                        data=orjson.dumps(data).decode()))  # fmt: skip
        for version, (before, after) in enumerate((("", "intake"), ("intake", owner)), 1):
            put(items.event(tenant, doc, 1, version, event_id=f"{doc}-{version}",
                            event_type="moved", source="intake", occurred_at=micros,
                            owner=after, previous_owner=before or None, status="reviewing",
                            assigned_at=None, due_at=None, data=data))  # fmt: skip
        put(items.receipt(tenant, f"{doc}-2", hashlib.sha256(doc.encode()).digest(), doc, 1, 2,
                          owner, "reviewing", at))  # fmt: skip
    if batch:
        flush()


@pytest.fixture
def generated(dynamo_url: str) -> Iterator[tuple[str, str, Any]]:
    db = client(dynamo_url)
    table = f"port-{uuid.uuid4().hex[:8]}"
    db.create_table(**k.table_definition(table))  # type: ignore[attr-defined]
    tenant = f"p-{uuid.uuid4().hex[:8]}"
    _generate(db, table, tenant, DOCUMENTS)
    yield table, tenant, db
    db.delete_table(TableName=table)  # type: ignore[attr-defined]  # moto keeps it in memory


def _count(admin: psycopg.Connection[Any], what: str, tenant: str) -> int:
    row = admin.execute(f"SELECT count(*) FROM handoff.{what} WHERE tenant_id = %s",
                        (tenant,)).fetchone()  # fmt: skip
    return int(row[0])  # type: ignore[index]


def test_a_generated_table_is_ported_verified_and_resumable(
    generated: tuple[str, str, Any], migrated: HandoffSettings, admin: psycopg.Connection[Any],
    dynamo_url: str,
) -> None:  # fmt: skip
    table, tenant, db = generated
    seen: list[int] = []

    def stop_half_way(n: int) -> None:
        seen.append(n)
        if n >= DOCUMENTS // 2:  # a sixth of the items: stop this import there
            raise Stop

    with pytest.raises(Stop):
        import_table(db, migrated.database_url, table, segments=4, page=max(500, DOCUMENTS // 10),
                     progress=stop_half_way)  # fmt: skip
    part = _count(admin, "document_state", tenant)
    assert 0 < part < DOCUMENTS
    # Resumed by the command itself, from where each segment got to.
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "import", "dynamodb", "--table", table,
         "--segments", "4"],
        capture_output=True, text=True, timeout=max(900, DOCUMENTS // 30), check=False,
        env={**os.environ, "HANDOFF_DYNAMODB_URL": dynamo_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "register these owners" in said and "owner-0 (" in said  # not services here
    assert _count(admin, "document_state", tenant) == DOCUMENTS
    assert _count(admin, "document_history", tenant) == 2 * DOCUMENTS
    assert _count(admin, "receipts", tenant) == DOCUMENTS
    by_owner = admin.execute("SELECT owner, sum(assigned) FROM handoff.owner_counts "
                             "WHERE tenant_id = %s GROUP BY 1", (tenant,)).fetchall()  # fmt: skip
    counts = dict(by_owner)
    assert sum(counts.values()) == DOCUMENTS and len(counts) == 5
    left = admin.execute("SELECT count(*) FROM handoff.import_progress WHERE source = %s",
                         (f"dynamodb:{table}",)).fetchone()  # fmt: skip
    assert left == (0,)  # verified, so its positions are forgotten
    for what in ("document_history", "receipts", "document_state", "owner_counts",
                 "owner_due_counts"):  # fmt: skip
        admin.execute(f"DELETE FROM handoff.{what} WHERE tenant_id = %s", (tenant,))
