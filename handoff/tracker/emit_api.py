"""``POST /v1/documents``, ``POST /v1/handoffs``, ``POST /v1/documents/{id}/runs``.

Each request is one call of the emit function, which also checks the bearer
credential: one database round trip per emit. The first acceptance answers
201, an identical retry 200 with the same body.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from opentelemetry.trace import SpanKind
from prometheus_client import Counter, Histogram
from psycopg_pool import AsyncConnectionPool

from handoff.core import trace_context
from handoff.core.emitter import Request as EmitRequest
from handoff.core.emitter import emit_http
from handoff.core.errors import ContractError, HandoffError, TransientConflict
from handoff.core.identity import Caller, Credential
from handoff.core.models import CreateRequest, HandoffRequest, Identifier, Receipt, StartRunRequest
from handoff.core.retry import CONFLICTS
from handoff.telemetry import tracing
from handoff.tracker.auth import Writer
from handoff.tracker.params import declared_query_only

router = APIRouter(prefix="/v1", tags=["emit"], dependencies=[Depends(declared_query_only)])

EMITS = Counter("handoff_emits_total", "Emit requests by kind and outcome code", ["kind", "code"])
EMIT_SECONDS = Histogram(
    "handoff_emit_seconds",
    "Server-side emit latency",
    ["kind"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)


RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "identical retry: the original receipt",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Receipt"}}},
    },
    401: {"description": "missing or unknown credential (code Unauthenticated)"},
    403: {"description": "SenderMismatch or NotPermitted"},
    404: {"description": "DocumentNotFound"},
    409: {
        "description": "OwnershipMismatch, VersionMismatch, ConflictingEventReuse, "
        "AlreadyExists or RunInProgress, with currentOwner/currentVersion"
    },
    422: {"description": "InvalidRequest: the body failed validation"},
}


async def _emit(
    request: Request,
    caller: Credential,
    body: EmitRequest,
    kind: str,
    document_id: str | None = None,
) -> JSONResponse:
    started = time.perf_counter()
    code = "Accepted"
    # The caller's trace continued (its traceparent header), or a new one.
    with tracing.span(
        f"emit {kind}",
        parent=request.headers.get("traceparent"),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": "POST", "url.path": request.url.path,
                    "handoff.event_type": body.event_type, "handoff.document": document_id
                    or getattr(body, "document_id", None)},
    ) as span:  # fmt: skip
        try:
            receipt = await emit_retrying(
                request.app.state.pool,
                caller,
                body,
                document_id,
                trace=trace_context.traceparent_of(span) if span is not None else None,
            )
            if receipt.replayed:
                code = "Replayed"
            return _receipt(receipt)
        except HandoffError as error:
            code = error.code if isinstance(error, ContractError) else "Error"
            raise
        finally:
            EMITS.labels(kind, code).inc()
            EMIT_SECONDS.labels(kind).observe(time.perf_counter() - started)
            if span is not None:
                span.set_attribute("handoff.outcome", code)


async def emit_retrying(
    pool: AsyncConnectionPool[Any],
    caller: Caller,
    body: EmitRequest,
    document_id: str | None = None,
    *,
    trace: str | None = None,
) -> Receipt:
    """One emit as ``caller``; serialization failures and deadlocks retried with the
    identical request (same event id), never answered as a 5xx. ``trace``: the
    traceparent its rows carry."""

    async def once() -> Receipt:
        async with pool.connection() as conn:
            return await emit_http(conn, caller, body, document_id, trace=trace)

    return await CONFLICTS.run_async(once, retry_on=(TransientConflict,))


def _receipt(receipt: Receipt) -> JSONResponse:
    return JSONResponse(
        receipt.model_dump(mode="json", by_alias=True),
        status_code=200 if receipt.replayed else 201,
    )


@router.post(
    "/documents",
    status_code=201,
    response_model=Receipt,
    responses=RESPONSES,
    summary="Initial assignment of a document",
)
async def create_document(request: Request, caller: Writer, body: CreateRequest) -> JSONResponse:
    return await _emit(request, caller, body, "create")


@router.post(
    "/handoffs",
    status_code=201,
    response_model=Receipt,
    responses=RESPONSES,
    summary="Handoff, progress or completion (nextOwner null with a terminal status)",
)
async def handoff(request: Request, caller: Writer, body: HandoffRequest) -> JSONResponse:
    return await _emit(request, caller, body, "handoff")


@router.post(
    "/documents/{document_id}/runs",
    status_code=201,
    response_model=Receipt,
    responses=RESPONSES,
    summary="Start a new run of a finished document (reprocessing)",
)
async def start_run(
    request: Request,
    caller: Writer,
    document_id: Annotated[Identifier, Path(description="The finished document")],
    body: StartRunRequest,
) -> JSONResponse:
    return await _emit(request, caller, body, "run", document_id)
