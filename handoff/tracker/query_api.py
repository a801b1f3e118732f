"""The query half of the HTTP API (DESIGN.md "Interfaces"): reads of one tenant.

A credential sees only its own tenant: the read model takes the tenant from
the credential, never from the request, and row-level security backs it up.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from prometheus_client import Histogram

from handoff.core.errors import CONTRACT_ERRORS
from handoff.core.models import INSTANT_HINT, Identifier, Instant, ServiceName
from handoff.tracker import cursors, operate
from handoff.tracker import read_model as reads
from handoff.tracker.auth import Caller
from handoff.tracker.params import declared_query_only
from handoff.tracker.read_model import MAX_PAGE, ReadModel
from handoff.tracker.views import (
    CompletedPage,
    DocumentView,
    FindPage,
    HistoryPage,
    OwnerPage,
    OwnersSnapshot,
    PipelineView,
    RejectionPage,
    Trends,
)

router = APIRouter(prefix="/v1", tags=["query"], dependencies=[Depends(declared_query_only)])

READ_SECONDS = Histogram(
    "handoff_read_seconds",
    "Server-side query latency (credential check, reader transaction, answer)",
    ["query"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)


@asynccontextmanager
async def _timed(query: str) -> AsyncIterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        READ_SECONDS.labels(query).observe(time.perf_counter() - started)


RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown credential (code Unauthenticated)"},
    422: {"description": "InvalidRequest: a parameter failed validation"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    **RESPONSES,
    404: {"description": "DocumentNotFound (also for another tenant's documents)"},
}

NO_NUL = "^[^\\u0000]*$"  # PostgreSQL text holds no NUL: free text is without it
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"page size, 1-{MAX_PAGE}")]
After = Annotated[
    str | None,
    Query(
        max_length=cursors.MAX_LENGTH,
        pattern=cursors.PATTERN,
        description=f"where the page starts: {cursors.FORMAT}",
    ),
]
Since = Annotated[Instant | None, Query(description=f"at or after; {INSTANT_HINT}")]
Until = Annotated[Instant | None, Query(description=f"before; {INSTANT_HINT}")]
RunId = Annotated[
    int | None, Query(alias="runId", ge=1, lt=2**31, description="a run; default the latest")
]
DocumentId = Annotated[Identifier, Path(description="the document")]
Owner = Annotated[ServiceName, Path(description="the owning service")]


def _model(request: Request) -> ReadModel:
    model: ReadModel = request.app.state.read_model
    return model


@router.get(
    "/documents/{document_id}",
    response_model=DocumentView,
    responses=NOT_FOUND,
    summary="Current state, strongly consistent",
)
async def document(
    request: Request, caller: Caller, document_id: DocumentId, run_id: RunId = None
) -> DocumentView:
    async with _timed("document"):
        return await _model(request).one(caller, reads.document(document_id, run_id))


@router.get(
    "/documents/{document_id}/history",
    response_model=HistoryPage,
    responses=NOT_FOUND,
    summary="Accepted versions in order",
)
async def history(
    request: Request,
    caller: Caller,
    document_id: DocumentId,
    run_id: RunId = None,
    limit: Limit = 100,
    after: After = None,
) -> HistoryPage:
    async with _timed("history"):
        return await _model(request).history(caller, document_id, run_id, limit, after)


@router.get(
    "/owners",
    response_model=OwnersSnapshot,
    responses=RESPONSES,
    summary="Per-owner counts (assigned, overdue, oldest assignment) as one snapshot",
)
async def owners(request: Request, caller: Caller) -> OwnersSnapshot:
    async with _timed("owners"):
        return await _model(request).one(caller, reads.owners())


@router.get(
    "/owners/{owner}/documents",
    response_model=OwnerPage,
    responses=RESPONSES,
    summary="An owner's documents, oldest assignment first (keyset pages)",
)
async def owner_documents(
    request: Request, caller: Caller, owner: Owner, limit: Limit = 50, after: After = None
) -> OwnerPage:
    async with _timed("owner_documents"):
        return await _model(request).one(caller, reads.owner_documents(owner, limit, after))


@router.get(
    "/owners/{owner}/overdue",
    response_model=OwnerPage,
    responses=RESPONSES,
    summary="An owner's documents whose deadline is strictly before now, earliest first",
)
async def owner_overdue(
    request: Request, caller: Caller, owner: Owner, limit: Limit = 50, after: After = None
) -> OwnerPage:
    async with _timed("owner_overdue"):
        return await _model(request).one(caller, reads.owner_overdue(owner, limit, after))


@router.get(
    "/rejections",
    response_model=RejectionPage,
    responses=RESPONSES,
    summary="Rejected attempts, newest first; optionally of one document",
)
async def rejections(
    request: Request,
    caller: Caller,
    document_id: Annotated[Identifier | None, Query(alias="documentId")] = None,
    code: Annotated[
        str | None,
        Query(
            description="Only this code, e.g. VersionMismatch",
            max_length=64,
            json_schema_extra={"enum": sorted(CONTRACT_ERRORS)},
        ),
    ] = None,
    sender: Annotated[ServiceName | None, Query(description="Only this sender")] = None,
    since: Since = None,
    until: Until = None,
    limit: Limit = 50,
    after: After = None,
) -> RejectionPage:
    async with _timed("rejections"):
        only = reads.RejectionFilter(code, sender, since, until)
        return await _model(request).one(caller, reads.rejections(document_id, limit, after, only))


@router.get(
    "/completed",
    response_model=CompletedPage,
    responses=RESPONSES,
    summary="Finished documents: newest completion first, or by id prefix in id order",
)
async def completed(
    request: Request,
    caller: Caller,
    id_prefix: Annotated[
        str | None,
        Query(
            alias="idPrefix",
            min_length=1,
            max_length=200,
            pattern=NO_NUL,
            description="Only documents whose id starts with this (then in id order)",
        ),
    ] = None,
    limit: Limit = 50,
    after: After = None,
) -> CompletedPage:
    async with _timed("completed"):
        return await _model(request).one(caller, reads.completed(limit, after, id_prefix))


@router.get(
    "/pipeline",
    response_model=PipelineView,
    responses=RESPONSES,
    summary="The stages in flow order (learned from history) with waiting work and pace",
)
async def pipeline(
    request: Request,
    caller: Caller,
    minutes: Annotated[
        int, Query(ge=1, le=1440, description="average the pace over this many minutes")
    ] = 15,
) -> PipelineView:
    async with _timed("pipeline"):
        return (await _model(request).pipeline(caller, minutes))[1]


@router.get(
    "/trends",
    response_model=Trends,
    responses=RESPONSES,
    summary="Backlog and oldest age per owner, created and completed, over the last hour or day",
)
async def trends(
    request: Request,
    caller: Caller,
    window: Annotated[reads.Window, Query(description="hour (minute points) or day (10 min)")] = (
        "hour"
    ),
) -> Trends:
    async with _timed("trends"):
        return (await _model(request).trends(caller, window))[1]


@router.get(
    "/find",
    response_model=FindPage,
    responses=RESPONSES,
    summary="Find documents by id prefix, owner, state, status, overdue, assigned range and "
    "data, sorted by id, assigned or due time; each request walks a bounded stretch",
)
async def find(
    request: Request,
    caller: Caller,
    id_prefix: Annotated[str, Query(alias="idPrefix", max_length=200, pattern=NO_NUL)] = "",
    owner: Annotated[ServiceName | None, Query(description="Only this owner's work")] = None,
    state: Annotated[reads.State, Query(description="active, completed or any")] = "active",
    status: Annotated[str | None, Query(max_length=100, pattern=NO_NUL)] = None,
    overdue: Annotated[bool, Query(description="Only work past its deadline")] = False,
    assigned_since: Annotated[Since, Query(alias="assignedSince")] = None,
    assigned_until: Annotated[Until, Query(alias="assignedUntil")] = None,
    data: Annotated[
        str | None,
        Query(
            max_length=2000,
            pattern=NO_NUL,
            description='JSON text of an object the data must contain, e.g. {"amount": 50}',
        ),
    ] = None,
    sort: Annotated[reads.Sort, Query(description="id; assigned or due need an owner")] = "id",
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "asc",
    limit: Limit = 50,
    after: After = None,
) -> FindPage:
    async with _timed("find"):
        only = reads.FindFilter(
            id_prefix=id_prefix,
            owner=owner,
            state=state,
            status=status or None,
            overdue=overdue,
            assigned_since=assigned_since,
            assigned_until=assigned_until,
            contains=reads.parse_contains(data),
            sort=sort,
            descending=order == "desc",
        )
        model = _model(request)
        return await model.one(caller, reads.find(only, limit, after, model.byte_order))


@router.get(
    "/operate",
    response_model=operate.OperateView,
    responses=RESPONSES,
    summary="Relay backlog, consumer lag, quarantined events and unresolved effects",
)
async def operate_state(request: Request, caller: Caller) -> operate.OperateView:
    async with _timed("operate"):
        state = request.app.state
        view = await operate.operate_view(
            _model(request), caller, state.tracker_settings, state.kafka_cluster
        )
        return view[1]
