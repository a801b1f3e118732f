"""Removing what a benchmark made in a tenant of its own, so the next run starts clean.

Every benchmark works in a fresh tenant; this deletes the tenant's rows from
each table a benchmark can fill (an empty delete costs an index probe) and
drops its services' roles.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from psycopg import sql

from handoff.core.services import remove_service

# Children before what they point at.
TABLES = (
    "effect_intents", "consumer_guards", "quarantine", "consumer_parked", "document_history",
    "document_state", "owner_counts", "owner_due_counts", "receipts", "rejections", "outbox",
    "flow_minutes", "flow_edges", "owner_samples",
)  # fmt: skip


def remove_tenant(database_url: str, tenant: str, services: Iterable[str] = (), *,
                  extra: Iterable[str] = ()) -> None:  # fmt: skip
    """Delete the tenant's rows (also from the ``extra`` tables, named ``schema.table``),
    then its services."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for table in (*extra, *(f"handoff.{t}" for t in TABLES)):
            conn.execute(sql.SQL("DELETE FROM {} WHERE tenant_id = %s").format(
                sql.Identifier(*table.split("."))), (tenant,))  # fmt: skip
        for name in services:
            remove_service(conn, name, tenant=tenant)
