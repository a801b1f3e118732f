"""Calling the emit transaction on a connection, in whatever transaction it is in.

In autocommit the call is its own transaction; a consumer calls it inside
its own transaction so that its guard row, its effect and the next emit
commit or roll back together (DESIGN.md "Consumers").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, LiteralString

import psycopg
from psycopg.types.json import Jsonb

from handoff.core import emit_sql as q
from handoff.core.db import translated
from handoff.core.errors import InvalidRequest
from handoff.core.identity import Caller, Credential
from handoff.core.models import (
    CreateRequest,
    HandoffRequest,
    Receipt,
    Rejection,
    StartRunRequest,
)

Request = CreateRequest | StartRunRequest | HandoffRequest


def params(request: Request, document_id: str | None = None) -> dict[str, Any]:
    """Arguments of the emit function for a validated request."""
    common = {
        "event_id": request.event_id,
        "event_type": request.event_type,
        "status": request.status,
        "due_at": request.due_at,
        "data": Jsonb(request.data) if request.data is not None else None,
        "correlation_id": request.correlation_id,
        "causation_id": request.causation_id,
    }
    if isinstance(request, HandoffRequest):
        return {
            **common,
            "kind": "handoff",
            "document_id": request.document_id,
            "run_id": request.run_id,
            "sender": request.sender,
            "next_owner": request.next_owner,
            "expected_version": request.expected_version,
        }
    if isinstance(request, CreateRequest):
        kind, document_id = "create", request.document_id
    elif document_id is None:
        raise InvalidRequest("a new run needs the document id")
    else:
        kind = "run"
    return {
        **common,
        "kind": kind,
        "document_id": document_id,
        "run_id": None,
        "sender": None,
        "next_owner": request.owner,
        "expected_version": None,
    }


def outcome(result: dict[str, Any]) -> Receipt | Rejection:
    """The function's JSON answer as a Receipt or a Rejection."""
    if result.get("accepted"):
        return Receipt.model_validate({**result["receipt"], "replayed": result["replayed"]})
    return Rejection.model_validate(
        {k: result.get(k) for k in ("code", "message", "currentVersion", "currentOwner")}
    )


def answer(result: dict[str, Any]) -> Receipt:
    """The function's JSON answer as a Receipt, or the typed error it names."""
    found = outcome(result)
    if isinstance(found, Rejection):
        found.raise_()
    return found


def emit_with(
    run: Callable[[LiteralString, dict[str, Any]], psycopg.Cursor[Any]],
    request: Request,
    document_id: str | None = None,
) -> Receipt | Rejection:
    """Emit through ``run`` (a connection's or a unit's statement runner), in its transaction."""
    row = run(q.EMIT_DIRECT, params(request, document_id)).fetchone()
    assert row is not None
    return outcome(row[0])


def emit_in(
    conn: psycopg.Connection[Any], request: Request, document_id: str | None = None
) -> Receipt | Rejection:
    """Emit as the service this connection logged in as, in the connection's transaction."""
    with translated():
        return emit_with(conn.execute, request, document_id)


def emit_direct(
    conn: psycopg.Connection[Any], request: Request, document_id: str | None = None
) -> Receipt:
    """Emit as the service this connection logged in as; a refusal raises."""
    found = emit_in(conn, request, document_id)
    if isinstance(found, Rejection):
        found.raise_()
    return found


def _as(credential: Caller, request: Request, document_id: str | None) -> dict[str, Any]:
    args = params(request, document_id)
    args["role"], args["secret_hash"] = credential.role, credential.secret_hash
    return args


def emit_as_in(
    conn: psycopg.Connection[Any],
    credential: Credential,
    request: Request,
    document_id: str | None = None,
) -> Receipt | Rejection:
    """Emit as the service a credential names, on a connection of the API role."""
    with translated():
        row = conn.execute(q.EMIT_HTTP, _as(credential, request, document_id)).fetchone()
    assert row is not None
    return outcome(row[0])


def emit_as(
    conn: psycopg.Connection[Any],
    credential: Credential,
    request: Request,
    document_id: str | None = None,
) -> Receipt:
    """``emit_as_in``; a refusal raises."""
    found = emit_as_in(conn, credential, request, document_id)
    if isinstance(found, Rejection):
        found.raise_()
    return found


async def emit_http(
    conn: psycopg.AsyncConnection[Any],
    credential: Caller,
    request: Request,
    document_id: str | None = None,
) -> Receipt:
    """Emit for the HTTP API, as the service the bearer credential names."""
    with translated():
        cursor = await conn.execute(q.EMIT_HTTP, _as(credential, request, document_id))
        row = await cursor.fetchone()
    assert row is not None
    return answer(row[0])
