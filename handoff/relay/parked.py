"""Parked outbox rows: listed for a person, and written again once repaired.

A row the relay cannot encode is parked with its reason, and its document's
later rows are parked behind it (in order), so that the slot's bound can
pass them. A person repairs the row (its payload, or the schema), then
unparks the document: its waiting rows are written again with new ids,
above every bound, and the relay publishes them in their order. On Citus,
where the relay marks rows instead of moving bounds, its rows are simply
unparked: unmarked again, fetched in their order.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from handoff.core import outbox_sql as q
from handoff.core.db import on_citus, translated
from handoff.core.errors import NothingParked


def list_parked(
    conn: psycopg.Connection[Any], *, tenant: str | None, limit: int
) -> list[dict[str, Any]]:
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(q.PARKED, {"tenant": tenant, "limit": limit}).fetchall()


def unpark(conn: psycopg.Connection[Any], tenant: str, document: str) -> tuple[int, int]:
    """Writes a document's parked rows (and any waiting behind them) again, in id order.

    Returns (parked rows, rows written again). A consumer may see an event
    of the document twice if a relay had it in flight: its guard absorbs it.
    """
    key = {"tenant": tenant, "document": document}
    with translated(), conn.transaction():
        conn.execute(q.UNPARK_LOCK, key)  # no emit of the document in between
        citus = on_citus(conn)
        row = conn.execute(q.CITUS_UNPARK if citus else q.UNPARK, key).fetchone()
        parked, again = (int(row[0]), int(row[1])) if row else (0, 0)
        if not parked:
            raise NothingParked(f"{tenant}/{document} has no parked outbox row")
    return parked, again
