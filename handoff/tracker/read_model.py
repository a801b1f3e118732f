"""The tracker's read model: each query is one reader transaction.

A read sends its whole transaction in one pipeline (one round trip): drop to
``handoff_reader``, accept the credential (which sets the tenant), run the
statements, commit. An unknown credential leaves the tenant unset, so the
statements already sent see no rows at all, and the caller gets
Unauthenticated. READ COMMITTED is enough: every answer is one statement's
snapshot, except the document page, which reads state, history and
rejections of one document (REPEATABLE READ there, so they agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from handoff.core.db import translated
from handoff.core.errors import DocumentNotFound, InvalidRequest, Unauthenticated
from handoff.core.identity import Credential
from handoff.tracker import cursors
from handoff.tracker import read_sql as q
from handoff.tracker.views import (
    DocumentView,
    HistoryEntry,
    HistoryPage,
    OwnerCounts,
    OwnerDocument,
    OwnerPage,
    OwnersSnapshot,
    RejectionPage,
    RejectionView,
)

MAX_PAGE = 500
Rows = list[dict[str, Any]]
Statement = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Reader:
    """Who is reading: the credential's service and the only tenant it may see."""

    tenant: str
    service: str


@dataclass(frozen=True)
class DocumentStory:
    """Everything the document page shows, from one snapshot."""

    document: DocumentView
    history: HistoryPage
    rejections: list[RejectionView]


class ReadModel:
    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def _read(
        self, credential: Credential, statements: list[Statement], *, repeatable: bool = False
    ) -> tuple[Reader, list[Rows]]:
        with translated(sent=False):
            async with self._pool.connection() as conn, conn.pipeline(), conn.transaction():
                if repeatable:
                    await conn.execute(q.REPEATABLE_READ)
                await conn.execute(q.AS_READER)
                who = conn.cursor(row_factory=dict_row)
                await who.execute(
                    q.READER_SESSION,
                    {"role": credential.role, "secret_hash": credential.secret_hash},
                )
                sent = []
                for sql, params in statements:
                    cur = conn.cursor(row_factory=dict_row)
                    await cur.execute(sql, params)
                    sent.append(cur)
                identity = await who.fetchone()
                results = [await cur.fetchall() for cur in sent]
        if identity is None:
            raise Unauthenticated("unknown or revoked service credential")
        return Reader(identity["tenant_id"], identity["service"]), results

    async def whoami(self, credential: Credential) -> Reader:
        reader, _ = await self._read(credential, [])
        return reader

    async def document(
        self, credential: Credential, document_id: str, run_id: int | None = None
    ) -> DocumentView:
        _, (rows,) = await self._read(credential, [_document(document_id, run_id)])
        return _one_document(rows, document_id, run_id)

    async def history(
        self,
        credential: Credential,
        document_id: str,
        run_id: int | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> HistoryPage:
        _, (doc, rows) = await self._read(
            credential,
            [_document(document_id, run_id), _history(document_id, run_id, limit, after)],
        )
        state = _one_document(doc, document_id, run_id)
        return _history_page(state, rows, limit)

    async def story(
        self, credential: Credential, document_id: str, run_id: int | None = None
    ) -> tuple[Reader, DocumentStory]:
        reader, (doc, history, rejections) = await self._read(
            credential,
            [
                _document(document_id, run_id),
                _history(document_id, run_id, MAX_PAGE, None),
                _rejections(document_id, 50, None),
            ],
            repeatable=True,
        )
        state = _one_document(doc, document_id, run_id)
        return reader, DocumentStory(
            state,
            _history_page(state, history, MAX_PAGE),
            [RejectionView.model_validate(r) for r in rejections],
        )

    async def owner_documents(
        self, credential: Credential, owner: str, limit: int = 50, after: str | None = None
    ) -> OwnerPage:
        return await self._owner_page(
            credential, q.OWNER_DOCUMENTS, "assigned_at", owner, limit, after
        )

    async def owner_overdue(
        self, credential: Credential, owner: str, limit: int = 50, after: str | None = None
    ) -> OwnerPage:
        return await self._owner_page(credential, q.OWNER_OVERDUE, "due_at", owner, limit, after)

    async def _owner_page(
        self, credential: Credential, sql: str, key: str, owner: str, limit: int, after: str | None
    ) -> OwnerPage:
        _check_limit(limit)
        after_at, after_id = cursors.parse_time_key(after)
        params = {"owner": owner, "after_at": after_at, "after_id": after_id, "limit": limit}
        _, (rows,) = await self._read(credential, [(sql, params)])
        items = [OwnerDocument.model_validate(r) for r in rows]
        last = rows[-1] if len(rows) == limit else None
        return OwnerPage(
            owner=owner,
            items=items,
            next=cursors.time_key(last[key], last["document_id"]) if last else None,
        )

    async def owners(self, credential: Credential) -> OwnersSnapshot:
        return (await self.owners_as(credential))[1]

    async def owners_as(self, credential: Credential) -> tuple[Reader, OwnersSnapshot]:
        # AS_OF in the same transaction: now() is the snapshot's time even
        # when no owner has work.
        reader, (rows, when) = await self._read(credential, [(q.OWNER_COUNTS, {}), (q.AS_OF, {})])
        return reader, OwnersSnapshot(
            as_of=when[0]["as_of"], owners=[OwnerCounts.model_validate(r) for r in rows]
        )

    async def rejections(
        self,
        credential: Credential,
        document_id: str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> RejectionPage:
        _, (rows,) = await self._read(credential, [_rejections(document_id, limit, after)])
        items = [RejectionView.model_validate(r) for r in rows]
        last = items[-1] if len(items) == limit else None
        return RejectionPage(items=items, next=cursors.number_key(last.id) if last else None)


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}")


def _document(document_id: str, run_id: int | None) -> Statement:
    return q.DOCUMENT, {"document_id": document_id, "run_id": run_id}


def _history(document_id: str, run_id: int | None, limit: int, after: str | None) -> Statement:
    _check_limit(limit)
    return q.HISTORY, {
        "document_id": document_id,
        "run_id": run_id,
        "after_version": cursors.parse_number_key(after, 0),
        "limit": limit,
    }


def _rejections(document_id: str | None, limit: int, after: str | None) -> Statement:
    _check_limit(limit)
    params = {
        "document_id": document_id,
        "before_id": cursors.parse_number_key(after, 2**62),
        "limit": limit,
    }
    return (q.REJECTIONS if document_id is None else q.DOCUMENT_REJECTIONS), params


def _one_document(rows: Rows, document_id: str, run_id: int | None) -> DocumentView:
    if not rows:
        run = f" run {run_id}" if run_id is not None else ""
        raise DocumentNotFound(f"document {document_id}{run} does not exist")
    return DocumentView.model_validate(rows[0])


def _history_page(state: DocumentView, rows: Rows, limit: int) -> HistoryPage:
    items = [HistoryEntry.model_validate(r) for r in rows]
    last = items[-1] if len(items) == limit else None
    return HistoryPage(
        document_id=state.document_id,
        run_id=state.run_id,
        items=items,
        next=cursors.number_key(last.version) if last else None,
    )
