"""The tracker's read model: queries, and the reader transaction that runs them.

A query is one named statement with how its rows become an answer. A read
runs one or more queries in one transaction, sent as one pipeline (one round
trip): drop to ``handoff_reader``, accept the credential (which sets the
tenant), run the statements, commit. The statements name the tenant as a
parameter, the credential's tenant this process learned on its first read
(one round trip more, once). An unknown credential leaves the tenant
unset, so the statements already sent see no rows at all, and the caller
gets Unauthenticated. READ COMMITTED is enough when every answer is one
statement's snapshot; a page that shows several (a document's state, history
and rejections) asks for REPEATABLE READ, so they agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

import orjson
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from handoff.core.db import translated
from handoff.core.errors import CONTRACT_ERRORS, DocumentNotFound, InvalidRequest, Unauthenticated
from handoff.core.identity import Credential
from handoff.core.models import data_problem
from handoff.tracker import cursors, flow, session_sql
from handoff.tracker import read_sql as q
from handoff.tracker.sessions import Session
from handoff.tracker.views import (
    CompletedDocument,
    CompletedPage,
    DocumentView,
    FindPage,
    FoundDocument,
    HistoryEntry,
    HistoryPage,
    OwnerCounts,
    OwnerDocument,
    OwnerPage,
    OwnerSeries,
    OwnersSnapshot,
    PipelineEdge,
    PipelineStage,
    PipelineView,
    RejectionPage,
    RejectionView,
    Trends,
)

MAX_PAGE = 500
Rows = list[dict[str, Any]]
T = TypeVar("T")


@dataclass(frozen=True)
class Reader:
    """Who is reading: the credential's service and the only tenant it may see."""

    tenant: str
    service: str


@dataclass(frozen=True)
class Query(Generic[T]):
    """One statement of a read (or a few, ``then``), and how their rows become the answer
    (``answer`` is given each statement's rows, in order)."""

    sql: str
    params: dict[str, Any]
    answer: Callable[..., T]
    then: tuple[tuple[str, dict[str, Any]], ...] = ()
    # Read as the API's own role, before the transaction takes the reader's: for a
    # figure over every tenant that a reader may see but whose rows it may not (the
    # relay's backlog). Why not a SECURITY DEFINER function, as before: on Citus the
    # reader's SET LOCAL ROLE goes to the workers' sessions too, and a definer's
    # statements there run as the reader, whom the outbox's shards refuse.
    system: bool = False

    def statements(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.sql, self.params), *self.then]


# Credentials (and UI sessions) whose tenant this process has seen, at most.
KNOWN_READERS = 10_000


class ReadModel:
    def __init__(self, pool: AsyncConnectionPool[Any], *, byte_order: bool = False) -> None:
        self._pool = pool
        # The database sorts text by bytes (collation C): an id prefix is a closed range.
        self.byte_order = byte_order
        # A credential's (or session's) tenant never changes, so once seen it is
        # sent with the statements of the same round trip that checks the
        # credential again (a revoked one still reads nothing).
        self._tenants: dict[bytes | str, str] = {}

    async def read(
        self, credential: Credential | Session, *queries: Query[Any], repeatable: bool = False
    ) -> tuple[Reader, list[Any]]:
        """Run ``queries`` in one reader transaction: who reads, and each query's answer.

        ``credential`` is the API's bearer credential, or the web UI's session.
        """
        key = credential.id_hash if isinstance(credential, Session) else credential.role
        tenant = self._tenants.get(key)
        if tenant is None:  # first read of this credential here: who it is, first
            identity, _ = await self._run(credential, (), repeatable=False, tenant="")
            if identity is None:
                raise Unauthenticated("unknown or revoked service credential")
            tenant = identity["tenant_id"]
            if len(self._tenants) >= KNOWN_READERS:
                self._tenants.clear()
            self._tenants[key] = tenant
        identity, results = await self._run(credential, queries, repeatable, tenant)
        if identity is None:
            raise Unauthenticated("unknown or revoked service credential")
        if identity["tenant_id"] != tenant:  # never expected: drop what was read
            self._tenants.pop(key, None)
            raise Unauthenticated("the credential's tenant changed; sign in again")
        reader = Reader(identity["tenant_id"], identity["service"])
        return reader, [query.answer(*rows) for query, rows in zip(queries, results, strict=True)]

    async def _run(
        self,
        credential: Credential | Session,
        queries: tuple[Query[Any], ...],
        repeatable: bool,
        tenant: str,
    ) -> tuple[dict[str, Any] | None, list[list[Rows]]]:
        """One reader transaction in one round trip: the identity, then ``queries``."""
        params: dict[str, Any]
        if isinstance(credential, Session):
            identity_sql, params = session_sql.READER, {"id_hash": credential.id_hash}
        else:
            identity_sql = q.READER_SESSION
            params = {"role": credential.role, "secret_hash": credential.secret_hash}
        with translated(sent=False):
            async with self._pool.connection() as conn, conn.pipeline(), conn.transaction():
                if repeatable:
                    await conn.execute(q.REPEATABLE_READ)
                sent: list[list[Any]] = [[] for _ in queries]
                for system in (True, False):
                    if not system:
                        await conn.execute(q.AS_READER)
                        who = conn.cursor(row_factory=dict_row)
                        await who.execute(identity_sql, params)
                    for query, cursors in zip(queries, sent, strict=True):
                        if query.system != system:
                            continue
                        for sql, query_params in query.statements():
                            cur = conn.cursor(row_factory=dict_row)
                            await cur.execute(sql, {**query_params, "tenant": tenant})
                            cursors.append(cur)
                identity = await who.fetchone()
                results = [[await cur.fetchall() for cur in cursors] for cursors in sent]
        return identity, results

    async def one(self, credential: Credential | Session, query: Query[T]) -> T:
        _, (answer,) = await self.read(credential, query)
        result: T = answer
        return result

    async def history(
        self,
        credential: Credential | Session,
        document_id: str,
        run_id: int | None,
        limit: int,
        after: str | None,
    ) -> HistoryPage:
        """A page of accepted versions; DocumentNotFound if the document (run) does not exist."""
        _, (state, entries) = await self.read(
            credential, document(document_id, run_id), versions(document_id, run_id, limit, after)
        )
        return history_page(state, entries, limit)

    async def pipeline(
        self, credential: Credential | Session, minutes: int = 15
    ) -> tuple[Reader, PipelineView]:
        """The stages in flow order with their waiting work and pace: one snapshot."""
        if not 1 <= minutes <= 24 * 60:
            raise InvalidRequest("minutes must be between 1 and 1440")
        reader, (snapshot, edges, recent, quarantined, moved) = await self.read(
            credential,
            owners(),
            Query(q.FLOW_EDGES, {}, _rows),
            Query(q.FLOW_RECENT, {"minutes": minutes}, _by("owner")),
            Query(q.QUARANTINED, {}, _by("consumer")),
            Query(q.FLOW_WINDOW_EDGES, {"minutes": minutes}, _rows),
        )
        return reader, pipeline_view(snapshot, edges, recent, quarantined, minutes, moved)

    async def trends(
        self, credential: Credential | Session, window: Window
    ) -> tuple[Reader, Trends]:
        """Backlog, oldest age, arrivals and completions over the last hour or day."""
        span, bucket_s = WINDOWS[window]
        params = {"bucket_s": bucket_s, "span_s": span.total_seconds(), "owners": CHART_OWNERS}
        samples_sql = q.SAMPLES_OVER_TIME if window == "hour" else q.SAMPLES_OVER_TIME_COARSE
        reader, (snapshot, samples, moves) = await self.read(
            credential,
            owners(),
            Query(samples_sql, params, _rows),
            Query(q.FLOW_OVER_TIME, params, _rows),
        )
        # Columns, not an object per point: up to 8 x 144 points, and a model
        # per point cost more than the statements (8 us each, measured).
        series: dict[str, OwnerSeries] = {}
        for row in samples:
            found = series.get(row["owner"])
            if found is None:
                found = series[row["owner"]] = OwnerSeries(
                    owner=row["owner"], at=[], assigned=[], overdue=[], oldest_s=[]
                )
            found.at.append(row["at"])
            found.assigned.append(row["assigned"])
            found.overdue.append(row["overdue"])
            found.oldest_s.append(row["oldest_s"])
        return reader, Trends(
            window=window,
            bucket_s=bucket_s,
            since=snapshot.as_of - span,
            as_of=snapshot.as_of,
            owners=[series[o] for o in sorted(series)],
            flow_at=[r["at"] for r in moves],
            created=[r["arrived"] for r in moves],
            completed=[r["completed"] for r in moves],
        )


# -- queries -----------------------------------------------------------------------------


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}")


def document(document_id: str, run_id: int | None = None) -> Query[DocumentView]:
    """The committed state, strongly consistent: the named run, else the latest."""

    def answer(rows: Rows) -> DocumentView:
        if not rows:
            run = f" run {run_id}" if run_id is not None else ""
            raise DocumentNotFound(f"document {document_id}{run} does not exist")
        return DocumentView.model_validate(rows[0])

    return Query(q.DOCUMENT, {"document_id": document_id, "run_id": run_id}, answer)


def versions(
    document_id: str, run_id: int | None, limit: int, after: str | None
) -> Query[list[HistoryEntry]]:
    """Accepted versions in order (see history_page for the page around them)."""
    _check_limit(limit)
    params = {
        "document_id": document_id,
        "run_id": run_id,
        "after_version": cursors.parse_number_key(after, 0),
        "limit": limit,
    }
    return Query(q.HISTORY, params, lambda rows: [HistoryEntry.model_validate(r) for r in rows])


def history_page(state: DocumentView, entries: list[HistoryEntry], limit: int) -> HistoryPage:
    last = entries[-1] if len(entries) == limit else None
    return HistoryPage(
        document_id=state.document_id,
        run_id=state.run_id,
        items=entries,
        next=cursors.number_key(last.version) if last else None,
    )


def owner_documents(owner: str, limit: int = 50, after: str | None = None) -> Query[OwnerPage]:
    """[GSI ByOwner] oldest assignment first."""
    return _owner_page(q.OWNER_DOCUMENTS, "assigned_at", owner, limit, after)


def owner_overdue(owner: str, limit: int = 50, after: str | None = None) -> Query[OwnerPage]:
    """[GSI ByOwnerDue] deadline strictly before now, earliest first."""
    return _owner_page(q.OWNER_OVERDUE, "due_at", owner, limit, after)


def _owner_page(sql: str, key: str, owner: str, limit: int, after: str | None) -> Query[OwnerPage]:
    _check_limit(limit)
    after_at, after_id = cursors.parse_time_key(after)

    def answer(rows: Rows) -> OwnerPage:
        last = rows[-1] if len(rows) == limit else None
        return OwnerPage(
            owner=owner,
            items=[OwnerDocument.model_validate(r) for r in rows],
            next=cursors.time_key(last[key], last["document_id"]) if last else None,
        )

    params = {"owner": owner, "after_at": after_at, "after_id": after_id, "limit": limit}
    return Query(sql, params, answer)


def owners() -> Query[OwnersSnapshot]:
    """Per-owner counts as one snapshot, with its time, and the ages of each owner's work
    from the latest minute sample."""

    def answer(rows: Rows, ages: Rows) -> OwnersSnapshot:
        by_owner = {a["owner"]: a for a in ages}
        counted = [
            OwnerCounts.model_validate({**by_owner.get(r["owner"], {}), **r})
            for r in rows
            if r["owner"] is not None
        ]
        return OwnersSnapshot(as_of=rows[0]["as_of"], owners=counted)

    return Query(q.OWNER_COUNTS, {}, answer, then=((q.OWNER_AGES, {}),))


@dataclass(frozen=True)
class RejectionFilter:
    """Which rejections to list: by code, by sender, in a time range (None: all)."""

    code: str | None = None
    sender: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.code is not None and self.code not in CONTRACT_ERRORS:
            raise InvalidRequest(f"code must be one of {', '.join(sorted(CONTRACT_ERRORS))}")
        if self.since and self.until and self.since >= self.until:
            raise InvalidRequest("since must be before until")


def rejections(
    document_id: str | None = None,
    limit: int = 50,
    after: str | None = None,
    only: RejectionFilter | None = None,
) -> Query[RejectionPage]:
    """Newest first; with a document, only its attempts; ``only`` filters further."""
    _check_limit(limit)
    only = only or RejectionFilter()
    params = {
        "document_id": document_id,
        "before_id": cursors.parse_number_key(after, 2**62),
        "limit": limit,
        "code": only.code,
        "sender": only.sender,
        "since": only.since,
        "until": only.until,
    }

    def answer(rows: Rows) -> RejectionPage:
        items = [RejectionView.model_validate(r) for r in rows]
        last = items[-1] if len(items) == limit else None
        return RejectionPage(items=items, next=cursors.number_key(last.id) if last else None)

    sql = q.REJECTIONS if document_id is None else q.DOCUMENT_REJECTIONS
    return Query(sql, params, answer)


# Above every character an id may hold (names.py forbids U+EFFFE..U+10FFFF):
# prefix + this bounds, in byte order, every id that starts with the prefix.
_PREFIX_END = "\U0010ffff"


def completed(
    limit: int = 50, after: str | None = None, id_prefix: str | None = None
) -> Query[CompletedPage]:
    """Finished documents: newest completion first, or those whose id starts with a prefix."""
    _check_limit(limit)
    if id_prefix:

        def by_id(rows: Rows) -> CompletedPage:
            items = [CompletedDocument.model_validate(r) for r in rows]
            last = items[-1] if len(items) == limit else None
            return CompletedPage(
                items=items, next=cursors.id_key(last.document_id, last.run_id) if last else None
            )

        # Runs start at 1, so (prefix, 0) is just before the first id with the
        # prefix; Python orders str by code point, as "C" orders UTF-8 bytes.
        after_id, after_run = max(cursors.parse_id_key(after), (id_prefix, 0))
        params = {
            "high": id_prefix + _PREFIX_END,
            "after_id": after_id,
            "after_run": after_run,
            "limit": limit,
        }
        return Query(q.COMPLETED_BY_PREFIX, params, by_id)

    def newest(rows: Rows) -> CompletedPage:
        items = [CompletedDocument.model_validate(r) for r in rows]
        last = items[-1] if len(items) == limit else None
        return CompletedPage(
            items=items,
            next=cursors.time_key(last.completed_at, last.document_id) if last else None,
        )

    before_at, before_id = cursors.parse_time_key_desc(after)
    params = {"before_at": before_at, "before_id": before_id, "limit": limit}
    return Query(q.COMPLETED, params, newest)


# -- flow ----------------------------------------------------------------------------------

Window = Literal["hour", "day"]
CHART_OWNERS = 8  # the charts follow the owners with the most waiting work
# The span of a chart and its bucket: 60 points an hour, 144 a day.
WINDOWS: dict[str, tuple[timedelta, int]] = {
    "hour": (timedelta(hours=1), 60),
    "day": (timedelta(days=1), 600),
}


def _rows(rows: Rows) -> Rows:
    return rows


def _by(key: str) -> Callable[[Rows], dict[str, dict[str, Any]]]:
    return lambda rows: {r[key]: r for r in rows}


def pipeline_view(
    snapshot: OwnersSnapshot,
    edges: Rows,
    recent: dict[str, dict[str, Any]],
    quarantined: dict[str, dict[str, Any]],
    minutes: int,
    moved: Rows | None = None,
) -> PipelineView:
    """The stages in learned order, each with its counts, pace and quarantine; the edges
    with the documents that took each in the window (``moved``)."""
    links = [(e["from_owner"], e["to_owner"], int(e["n"])) for e in edges]
    in_window = {(e["from_owner"], e["to_owner"]): int(e["n"]) for e in moved or []}
    waiting = {c.owner: c for c in snapshot.owners}
    columns = flow.stage_columns(links, also=[*waiting, *quarantined])

    def per_minute(owner: str, column: str) -> float:
        return round(int(recent.get(owner, {}).get(column) or 0) / minutes, 2)

    stages = []
    for owner, column in columns.items():
        counts = waiting.get(owner)
        stages.append(
            PipelineStage(
                owner=owner,
                waiting=counts.assigned if counts else 0,
                overdue=counts.overdue if counts else 0,
                oldest_assigned_at=counts.oldest_assigned_at if counts else None,
                arrived_per_minute=per_minute(owner, "arrived"),
                departed_per_minute=per_minute(owner, "departed"),
                quarantined=int(quarantined.get(owner, {}).get("quarantined") or 0),
                next=flow.next_owners(links, owner),
                column=column,
            )
        )
    return PipelineView(
        as_of=snapshot.as_of,
        window_minutes=minutes,
        created_per_minute=per_minute(flow.CREATED, "departed"),
        completed_per_minute=per_minute(flow.CREATED, "arrived"),
        stages=stages,
        edges=[
            PipelineEdge(
                from_owner=source,
                to_owner=target,
                moved=in_window.get((source, target), 0),
                total=total,
            )
            for source, target, total in links
        ],
    )


# -- find ------------------------------------------------------------------------------

FIND_BUDGET = 5_000  # index entries one find request walks at most
Sort = Literal["id", "assigned", "due"]
State = Literal["active", "completed", "any"]
_MAX_CONTAINS = 2_000


@dataclass(frozen=True)
class FindFilter:
    """What Find looks for and in which order (None: any)."""

    id_prefix: str = ""
    owner: str | None = None
    state: State = "active"
    status: str | None = None
    overdue: bool = False
    assigned_since: datetime | None = None
    assigned_until: datetime | None = None
    contains: dict[str, Any] | None = None
    sort: Sort = "id"
    descending: bool = False

    def __post_init__(self) -> None:
        if self.sort not in ("id", "assigned", "due"):
            raise InvalidRequest("sort must be id, assigned or due")
        if self.state not in ("active", "completed", "any"):
            raise InvalidRequest("state must be active, completed or any")
        if self.sort != "id" and self.owner is None:
            raise InvalidRequest(f"sorting by {self.sort} lists one owner's work: pick an owner")
        if self.sort != "id" and self.state == "completed":
            raise InvalidRequest(f"sorting by {self.sort} lists waiting work, not completed")
        since, until = self.assigned_since, self.assigned_until
        if since and until and since >= until:
            raise InvalidRequest("assigned since must be before assigned until")
        if len(self.id_prefix) > 200 or (self.status and len(self.status) > 100):
            raise InvalidRequest("id prefix (200) or status (100 characters) is too long")
        if self.contains is not None and not isinstance(self.contains, dict):
            raise InvalidRequest('data must be a JSON object, e.g. {"amount": 50}')


def parse_contains(text: str | None) -> dict[str, Any] | None:
    """The data filter as typed: a JSON object the document's data must contain."""
    if text is None or not text.strip():
        return None
    if len(text) > _MAX_CONTAINS:
        raise InvalidRequest(f"data filter is longer than {_MAX_CONTAINS} characters")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f'data filter is not JSON ({exc}); e.g. {{"amount": 50}}') from exc
    if not isinstance(value, dict):
        raise InvalidRequest('data filter must be a JSON object, e.g. {"amount": 50}')
    problem = data_problem(value)
    if problem is not None:
        raise InvalidRequest(f"data filter: {problem}")
    return value


def find(
    only: FindFilter,
    limit: int = 50,
    after: str | None = None,
    byte_order: bool = False,
    budget: int = FIND_BUDGET,
) -> Query[FindPage]:
    """One bounded walk of the index the sort names, filtered (see read_sql FIND_WALKS)."""
    _check_limit(limit)
    walk = only.sort
    if walk == "id":
        after_id, after_run = cursors.parse_id_key(after)
        after_at = cursors.START_AT
    else:
        after_at, after_id = cursors.parse_time_key(after)
        after_run = 0
    params: dict[str, Any] = {
        "low": only.id_prefix,
        "high": only.id_prefix + _PREFIX_END,
        "prefix": only.id_prefix,
        "owner": only.owner,
        "state": only.state,
        "status": only.status,
        "overdue": only.overdue,
        "since": only.assigned_since or cursors.START_AT,
        "until": only.assigned_until or cursors.END_AT,
        "filter_since": only.assigned_since,
        "filter_until": only.assigned_until,
        "due_before": datetime.now(UTC) if only.overdue else cursors.END_AT,
        "contains": Jsonb(only.contains) if only.contains is not None else None,
        "after_id": after_id,
        "after_run": after_run,
        "after_at": after_at,
        "budget": budget,
        "limit": limit,
    }
    sql = q.find(walk, only.descending, after is not None, byte_order and bool(only.id_prefix))

    def key(document_id: str, run_id: int, assigned_at: Any, due_at: Any) -> str:
        if walk == "id":
            return cursors.id_key(document_id, run_id)
        return cursors.time_key(assigned_at if walk == "assigned" else due_at, document_id)

    def answer(rows: Rows) -> FindPage:
        scanned = int(rows[0]["scanned"]) if rows else 0
        items = [FoundDocument.model_validate(r) for r in rows if r["document_id"] is not None]
        if len(items) == limit:
            last = items[-1]
            nxt = key(last.document_id, last.run_id, last.assigned_at, last.due_at)
        elif scanned == budget:  # stopped at the bound: continue from the last walked
            r = rows[0]
            nxt = key(r["last_document_id"], r["last_run_id"], r["last_assigned_at"],
                      r["last_due_at"])  # fmt: skip
        else:
            nxt = None
        return FindPage(items=items, scanned=scanned, next=nxt)

    return Query(sql, params, answer)
