"""Row-level security behind the read model: the backstop if a query forgot its tenant."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import errors

from handoff.core.client import HandoffClient
from handoff.core.identity import Credential
from tests.fix_contract import ServiceFactory

TABLES = (
    "document_state",
    "document_history",
    "owner_counts",
    "owner_due_counts",
    "rejections",
)


def _as_reader(conn: psycopg.Connection[Any], credential: Credential) -> list[Any]:
    conn.execute("SET LOCAL ROLE handoff_reader")
    return conn.execute(
        "SELECT * FROM handoff.reader_session(%s, %s)", (credential.role, credential.secret_hash)
    ).fetchall()


@pytest.fixture
def two_tenants(service: ServiceFactory, migrated: Any) -> tuple[Credential, Credential]:
    mine = service("routing", can_create=True)
    theirs = service("routing", can_create=True, in_tenant=f"other-{uuid.uuid4().hex[:8]}")
    for credential in (mine, theirs):
        with HandoffClient.direct(credential, migrated.database_url, pool_size=1) as client:
            client.create(
                event_id=str(uuid.uuid4()),
                document_id="shared-name",
                owner="routing",
                status="new",
                due_at=None,
            )
    return mine, theirs


def test_unfiltered_queries_see_only_the_credentials_tenant(
    pg: psycopg.Connection[Any], two_tenants: tuple[Credential, Credential], tenant: str
) -> None:
    mine, _ = two_tenants
    with pg.transaction():
        assert _as_reader(pg, mine) == [(tenant, "routing")]
        for table in TABLES:
            tenants = pg.execute(f"SELECT DISTINCT tenant_id FROM handoff.{table}").fetchall()
            assert set(tenants) <= {(tenant,)}, table
        # Not a single row of another tenant, though other tenants have plenty.
        seen = pg.execute("SELECT count(*) FROM handoff.document_state").fetchone()
        assert seen == (1,)


def test_no_credential_no_rows(
    pg: psycopg.Connection[Any], two_tenants: tuple[Credential, Credential]
) -> None:
    with pg.transaction():
        assert _as_reader(pg, Credential.new()) == []
        for table in TABLES:
            assert pg.execute(f"SELECT count(*) FROM handoff.{table}").fetchone() == (0,), table


def test_the_reader_cannot_see_credentials_or_write(
    pg: psycopg.Connection[Any], two_tenants: tuple[Credential, Credential]
) -> None:
    mine, _ = two_tenants
    with pytest.raises(errors.InsufficientPrivilege), pg.transaction():
        _as_reader(pg, mine)
        pg.execute("SELECT secret_hash FROM handoff.services")
    with pytest.raises(errors.InsufficientPrivilege), pg.transaction():
        _as_reader(pg, mine)
        pg.execute("UPDATE handoff.document_state SET status = 'x'")
    with pytest.raises(errors.InsufficientPrivilege), pg.transaction():
        _as_reader(pg, mine)
        pg.execute("SELECT handoff.fold_due_counts()")


def test_service_roles_cannot_become_readers(
    pg: psycopg.Connection[Any], two_tenants: tuple[Credential, Credential], migrated: Any
) -> None:
    mine, _ = two_tenants
    conninfo = psycopg.conninfo.make_conninfo(
        migrated.database_url, user=mine.role, password=mine.secret
    )
    with psycopg.connect(conninfo) as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute("SET ROLE handoff_reader")
