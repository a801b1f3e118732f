"""The effect ledger: intents recorded in a unit of work, and operated by people.

A handler records an intent with ``tx.intend(...)`` (core/tx.py) in its guard
transaction; an executor (handoff/consumers/executor.py) performs it after
the commit. What a person does with an intent nobody could settle
(``handoff effects list --unresolved``, ``handoff effects resolve``) is here,
as the admin role, every decision recorded with who and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from handoff.core import effects_sql as q
from handoff.core.db import by_tenant, translated
from handoff.core.errors import EffectNotFound, EffectNotUnresolved, InvalidRequest

STATES = ("intended", "claimed", "submitted", "succeeded", "failed", "unknown")
# What a person may decide about an unresolved intent.
DECISIONS = ("succeeded", "failed", "retry")


@dataclass(frozen=True)
class Intent:
    """The intent that stands for an effect after ``tx.intend``.

    ``created`` is False when it existed already: recorded before by this
    event with the same request, or by another event (``event_id``) for the
    same business operation (``business_key``), which then authorises
    nothing new.
    """

    id: int
    idempotency_key: str
    state: str
    created: bool
    event_id: str
    business_key: str | None


@dataclass(frozen=True)
class WorkflowRun:
    execution_name: str
    started_at: datetime
    created: bool


def intend(
    conn: psycopg.Connection[Any],
    *,
    event_id: str,
    effect: str,
    document_id: str,
    run_id: int,
    request: dict[str, Any],
    business_key: str | None = None,
    tenant: str | None = None,
) -> Intent:
    """Record an effect intent in the connection's unit; naming the consumer's ``tenant``
    when known (on Citus the call then runs on the tenant's worker)."""
    params = {
        "event_id": event_id,
        "effect": effect,
        "document_id": document_id,
        "run_id": run_id,
        "request": Jsonb(request),
        "business_key": business_key,
    }
    with translated():
        row = conn.execute(*by_tenant(q.INTEND, q.INTEND_FOR, params, tenant)).fetchone()
    assert row is not None  # the function answers one row or raises
    return Intent(*row)


def start_workflow(
    conn: psycopg.Connection[Any],
    *,
    workflow: str,
    execution_name: str,
    document_id: str,
    run_id: int,
    event_id: str,
    input: dict[str, Any],
    tenant: str | None = None,
) -> WorkflowRun:
    params = {
        "workflow": workflow,
        "name": execution_name,
        "document_id": document_id,
        "run_id": run_id,
        "event_id": event_id,
        "input": Jsonb(input),
    }
    with translated():
        row = conn.execute(
            *by_tenant(q.WORKFLOW_START, q.WORKFLOW_START_FOR, params, tenant)
        ).fetchone()
    assert row is not None
    return WorkflowRun(*row)


# -- operators (the admin role) ------------------------------------------------------


def list_intents(
    conn: psycopg.Connection[Any],
    *,
    tenant: str | None = None,
    consumer: str | None = None,
    document: str | None = None,
    state: str | None = None,
    unresolved: bool = False,
    limit: int = 50,
) -> list[dict[str, Any]]:
    if state is not None and state not in STATES:
        raise InvalidRequest(f"state must be one of {', '.join(STATES)}")
    if not 1 <= limit <= 10_000:
        raise InvalidRequest("limit must be between 1 and 10000")
    params = {
        "tenant": tenant,
        "consumer": consumer,
        "document": document,
        "state": state,
        "unresolved": unresolved,
        "limit": limit,
    }
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(q.LIST, params).fetchall()


@dataclass(frozen=True)
class IntentRecord:
    fields: dict[str, Any]
    history: list[dict[str, Any]]


def show_intent(conn: psycopg.Connection[Any], intent_id: int) -> IntentRecord:
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(q.SHOW, {"id": intent_id}).fetchone()
        if found is None:
            raise EffectNotFound(f"no effect intent {intent_id}")
        return IntentRecord(found, cur.execute(q.HISTORY, {"id": intent_id}).fetchall())


def resolve(
    conn: psycopg.Connection[Any],
    intent_id: int,
    *,
    outcome: str,
    actor: str,
    reason: str,
    provider_ref: str | None = None,
) -> None:
    """Settle an unresolved intent: ``succeeded``/``failed`` as a person found it at the
    provider, or ``retry`` (the executors look it up again before any resubmission)."""
    if outcome not in DECISIONS:
        raise InvalidRequest(f"outcome must be one of {', '.join(DECISIONS)}")
    if not reason.strip():
        raise InvalidRequest("say why (--reason): it is recorded in the intent's history")
    if not actor.strip():
        raise InvalidRequest("say who decides (--by)")
    with translated(), conn.transaction():
        found = conn.execute(q.TENANT_OF, {"id": intent_id}).fetchone()
        key = {"id": intent_id, "tenant": found[0] if found else None}
        row = conn.execute(q.LOCK, key).fetchone() if found else None
        if row is None:
            raise EffectNotFound(f"no effect intent {intent_id}")
        state, reconciliation = row
        if reconciliation != "unresolved":
            raise EffectNotUnresolved(
                f"intent {intent_id} is {state} ({reconciliation}), not unresolved: "
                "only what the executors gave up on is decided by hand"
            )
        decide = q.RESOLVE_RETRY if outcome == "retry" else q.RESOLVE_SETTLED
        conn.execute(decide, {**key, "state": outcome, "provider_ref": provider_ref})
        conn.execute(
            q.RECORD_DECISION,
            {
                **key,
                "actor": actor,
                "from_state": state,
                "to_state": "unknown" if outcome == "retry" else outcome,
                "detail": f"resolved by hand ({outcome}): {reason}",
            },
        )
