"""The store interface: what the emit contract and the tracker's reads need of a store.

Two stores keep the same contract: PostgreSQL (this module's
``PostgresStore``, over the functions the rest of Handoff uses) and the
AWS design's single DynamoDB table (``handoff.dynamo.store.DynamoStore``).
One contract suite runs over both (tests/integration/dynamodb). Shapes are
plain: a document is ``document_id, run_id, owner, status, version,
assigned_at, due_at, data``; a history entry ``version, eventType, owner,
previousOwner, status, source``; a listing entry ``document_id, run_id``.
"""

from __future__ import annotations

from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from handoff.core import services
from handoff.core import store_sql as q
from handoff.core.db import translated
from handoff.core.emitter import Request, emit_as_in
from handoff.core.identity import Credential
from handoff.core.models import Receipt, Rejection


class Store(Protocol):
    def add_service(self, tenant: str, name: str, *, can_create: bool = False) -> Credential: ...

    def send(
        self, credential: Credential, request: Request, document_id: str | None = None
    ) -> Receipt | Rejection: ...

    def document(self, tenant: str, doc: str, run: int | None = None) -> dict[str, Any] | None:
        """Strongly consistent: the named run, else the latest."""

    def history(self, tenant: str, doc: str, run: int) -> list[dict[str, Any]]: ...

    def owner_documents(
        self, tenant: str, owner: str, *, overdue: bool = False, limit: int = 50
    ) -> list[dict[str, Any]]:
        """May lag behind the latest handoffs on a store whose indexes are eventually
        consistent (DynamoDB's GSIs)."""

    def owner_counts(self, tenant: str) -> dict[str, int]: ...

    def rejections(self, tenant: str, limit: int = 50) -> list[dict[str, Any]]: ...


class PostgresStore:
    """The PostgreSQL store, as the admin role (the HTTP API's path for the emit)."""

    def __init__(self, database_url: str) -> None:
        self.conn = psycopg.connect(database_url, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def add_service(self, tenant: str, name: str, *, can_create: bool = False) -> Credential:
        return services.add_service(self.conn, name, tenant=tenant, can_create=can_create)

    def send(
        self, credential: Credential, request: Request, document_id: str | None = None
    ) -> Receipt | Rejection:
        return emit_as_in(self.conn, credential, request, document_id)

    def _rows(self, sql: Any, **params: Any) -> list[dict[str, Any]]:
        with translated(), self.conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(sql, params).fetchall()

    def document(self, tenant: str, doc: str, run: int | None = None) -> dict[str, Any] | None:
        found = self._rows(q.DOCUMENT, tenant=tenant, document_id=doc, run_id=run)
        return found[0] if found else None

    def history(self, tenant: str, doc: str, run: int) -> list[dict[str, Any]]:
        return self._rows(q.HISTORY, tenant=tenant, document_id=doc, run_id=run)

    def owner_documents(
        self, tenant: str, owner: str, *, overdue: bool = False, limit: int = 50
    ) -> list[dict[str, Any]]:
        sql = q.OWNER_OVERDUE if overdue else q.OWNER_DOCUMENTS
        return self._rows(sql, tenant=tenant, owner=owner, limit=limit)

    def owner_counts(self, tenant: str) -> dict[str, int]:
        with translated():
            rows = self.conn.execute(q.OWNER_COUNTS, {"tenant": tenant}).fetchall()
        return {owner: int(n) for owner, n in rows}

    def rejections(self, tenant: str, limit: int = 50) -> list[dict[str, Any]]:
        return self._rows(q.REJECTIONS, tenant=tenant, limit=limit)
