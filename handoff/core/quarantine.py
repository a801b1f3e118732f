"""Operating the quarantine: list, show, ask for a retry, discard (``handoff quarantine``).

Runs as the admin role. A retry is only asked for here: the consumer that
owns the entry picks it up and sends it through the same guard as any
delivery (handoff/consumers), since only that process has the handler.
Every decision records who made it and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from handoff.core import quarantine_sql as q
from handoff.core.db import translated
from handoff.core.errors import InvalidRequest, QuarantineEntryClosed, QuarantineEntryNotFound

STATUSES = ("open", "retry", "resolved", "discarded")
PENDING = ("open", "retry")


@dataclass(frozen=True)
class Entry:
    fields: dict[str, Any]
    audit: list[dict[str, Any]]


def list_entries(
    conn: psycopg.Connection[Any],
    *,
    tenant: str | None = None,
    consumer: str | None = None,
    status: str | None = "open",
    limit: int = 50,
) -> list[dict[str, Any]]:
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(STATUSES)}")
    if not 1 <= limit <= 10_000:
        raise InvalidRequest("limit must be between 1 and 10000")
    params = {"tenant": tenant, "consumer": consumer, "status": status, "limit": limit}
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(q.LIST, params).fetchall()


def show_entry(conn: psycopg.Connection[Any], entry_id: int) -> Entry:
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(q.SHOW, {"id": entry_id}).fetchone()
        if found is None:
            raise QuarantineEntryNotFound(f"no quarantine entry {entry_id}")
        return Entry(found, cur.execute(q.AUDIT, {"id": entry_id}).fetchall())


def _decide(
    conn: psycopg.Connection[Any], entry_id: int, status: str, actor: str, reason: str
) -> None:
    if not reason.strip():
        raise InvalidRequest("say why (--reason): it is recorded in the entry's audit trail")
    if not actor.strip():
        raise InvalidRequest("say who decides (--by)")
    with translated(), conn.transaction():
        found = conn.execute(q.TENANT_OF, {"id": entry_id}).fetchone()
        key = {"id": entry_id, "tenant": found[0] if found else None}
        row = conn.execute(q.LOCK, key).fetchone() if found else None
        if row is None:
            raise QuarantineEntryNotFound(f"no quarantine entry {entry_id}")
        if row[0] not in PENDING:
            raise QuarantineEntryClosed(f"entry {entry_id} is already {row[0]}")
        conn.execute(q.SET_STATUS, {**key, "status": status})
        action = "retry requested" if status == "retry" else "discarded"
        conn.execute(q.RECORD, {**key, "actor": actor, "action": action, "detail": reason})


def request_retry(conn: psycopg.Connection[Any], entry_id: int, *, actor: str, reason: str) -> None:
    """Ask the owning consumer to take the event again, through its guard."""
    _decide(conn, entry_id, "retry", actor, reason)


def discard(conn: psycopg.Connection[Any], entry_id: int, *, actor: str, reason: str) -> None:
    """Give the event up; its document's parked events go on."""
    _decide(conn, entry_id, "discarded", actor, reason)
