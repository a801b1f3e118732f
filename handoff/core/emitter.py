"""Calling the emit transaction on a connection, in whatever transaction it is in.

In autocommit the call is its own transaction; a consumer calls it inside
its own transaction so that its guard row, its effect and the next emit
commit or roll back together (DESIGN.md "Consumers").

Outside a unit, calls name the caller's tenant (``emit_direct_for``,
``emit_http_for``): on Citus that is what hands the whole call to the worker
that holds the tenant. The tenant of a credential never changes, so it is
learned once (one round trip more, the first time) and kept.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, LiteralString

import psycopg
from psycopg.types.json import Jsonb

from handoff.core import emit_sql as q
from handoff.core.db import by_tenant, translated
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

UNKNOWN_CREDENTIAL = {
    "accepted": False,
    "code": "Unauthenticated",
    "message": "unknown or revoked service credential",
}
# Credentials whose tenant this process has seen, at most (then it starts over).
KNOWN_CREDENTIALS = 10_000


class Tenants:
    """The tenant of each credential role seen here (a role acts in one tenant for life)."""

    def __init__(self) -> None:
        self._of: dict[str, str] = {}

    def get(self, role: str) -> str | None:
        return self._of.get(role)

    def learn(self, role: str, tenant: str) -> str:
        if len(self._of) >= KNOWN_CREDENTIALS:
            self._of.clear()
        self._of[role] = tenant
        return tenant

    def answered(self, role: str, result: dict[str, Any]) -> dict[str, Any]:
        """``result``, after forgetting a credential the database no longer knows."""
        if result.get("code") == "Unauthenticated":
            self._of.pop(role, None)
        return result


TENANTS = Tenants()


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
    tenant: str | None = None,
) -> Receipt | Rejection:
    """Emit through ``run`` (a connection's or a unit's statement runner), in its
    transaction; naming the service's ``tenant`` when known."""
    statement = by_tenant(q.EMIT_DIRECT, q.EMIT_DIRECT_FOR, params(request, document_id), tenant)
    row = run(*statement).fetchone()
    assert row is not None
    return outcome(row[0])


def own_tenant(conn: psycopg.Connection[Any]) -> str:
    """The tenant of the service this connection logged in as (28000 if it is none)."""
    with translated():
        row = conn.execute(q.OWN_TENANT).fetchone()
    assert row is not None
    tenant: str = row[0]
    return tenant


def emit_in(
    conn: psycopg.Connection[Any],
    request: Request,
    document_id: str | None = None,
    *,
    tenant: str | None = None,
) -> Receipt | Rejection:
    """Emit as the service this connection logged in as, in the connection's transaction;
    naming its ``tenant`` (``own_tenant``) when known."""
    with translated():
        return emit_with(conn.execute, request, document_id, tenant)


def emit_direct(
    conn: psycopg.Connection[Any],
    request: Request,
    document_id: str | None = None,
    *,
    tenant: str | None = None,
    trace: str | None = None,
) -> Receipt:
    """Emit as the service this connection logged in as; a refusal raises. ``trace``:
    a traceparent its rows carry (an autocommit connection: in a transaction of its own,
    as ``emit_http``)."""
    own = trace is not None and conn.autocommit  # else the caller's transaction holds it
    with conn.transaction() if own else nullcontext():
        if trace is not None:
            conn.execute(q.SET_TRACE, {"traceparent": trace})
        found = emit_in(conn, request, document_id, tenant=tenant)
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
    args = _as(credential, request, document_id)
    with translated():
        if (tenant := TENANTS.get(credential.role)) is None:
            known = conn.execute(q.CREDENTIAL_TENANT, args).fetchone()
            if known is None or known[0] is None:
                return outcome(UNKNOWN_CREDENTIAL)
            tenant = TENANTS.learn(credential.role, known[0])
        row = conn.execute(q.EMIT_HTTP_FOR, {**args, "tenant": tenant}).fetchone()
    assert row is not None
    return outcome(TENANTS.answered(credential.role, row[0]))


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
    *,
    trace: str | None = None,
) -> Receipt:
    """Emit for the HTTP API, as the service the bearer credential names; its rows
    carrying ``trace`` (a traceparent) when given."""
    if trace is None:
        return await _emit_http(conn, credential, request, document_id)
    # A transaction of its own so the setting holds for the emit and no longer: three
    # statements more, paid only by a sampled request.
    async with conn.transaction():
        await conn.execute(q.SET_TRACE, {"traceparent": trace})
        return await _emit_http(conn, credential, request, document_id)


async def _emit_http(
    conn: psycopg.AsyncConnection[Any],
    credential: Caller,
    request: Request,
    document_id: str | None = None,
) -> Receipt:
    args = _as(credential, request, document_id)
    with translated():
        if (tenant := TENANTS.get(credential.role)) is None:
            known = await (await conn.execute(q.CREDENTIAL_TENANT, args)).fetchone()
            if known is None or known[0] is None:
                return answer(UNKNOWN_CREDENTIAL)
            tenant = TENANTS.learn(credential.role, known[0])
        cursor = await conn.execute(q.EMIT_HTTP_FOR, {**args, "tenant": tenant})
        row = await cursor.fetchone()
    assert row is not None
    return answer(TENANTS.answered(credential.role, row[0]))
