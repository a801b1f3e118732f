"""The relay's fetch on one server: its plan walks the same indexes whenever it was made.

The relay plans its fetch once, as a generic plan (core/outbox_sql.py), on
whatever statistics the outbox has when the relay starts, and keeps it while
the outbox grows. So the plan must not depend on them: these tests make the
plan, as the relay's session does, in a database of its own whose outbox is
empty and analysed (a new install, or everything purged), and again with
rows in it.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from handoff.core import outbox_sql as q
from handoff.core.settings import HandoffSettings
from handoff.stack.migrate import upgrade

# The held-behind lookup as the fetch had it before: on an empty, analysed
# outbox its plan found "the first parked row of this document" by walking the
# primary key upwards, every older row of the outbox for each row fetched.
PLAIN_LOOKUP = (
    "(SELECT min(p.id) FROM handoff.outbox p\n"
    "                WHERE p.parked_at IS NOT NULL AND p.tenant_id = o.tenant_id\n"
    "                  AND p.document_id = o.document_id AND p.id < o.id)"
)

ROWS = """
INSERT INTO handoff.outbox (tenant_id, document_id, run_id, version, event_id, event_type, payload)
SELECT 'plan', 'doc-' || (g %% 50), 1, g, 'event-' || g, 'handed', '{}'::jsonb
  FROM generate_series(1, %(rows)s) AS g
"""


def _numbered(statement: str) -> str:
    """psycopg's named placeholders as $1, $2…, for EXPLAIN (GENERIC_PLAN)."""
    names: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        return f"${names.setdefault(m.group(1), len(names) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, statement.replace("%%", "%"))


def _scans(plan: dict[str, Any]) -> dict[str, set[str]]:
    """How each alias of the outbox is read: its index name, or the node type."""
    found: dict[str, set[str]] = {}

    def walk(node: dict[str, Any]) -> None:
        if node.get("Relation Name") == "outbox":
            found.setdefault(node["Alias"], set()).add(node.get("Index Name") or node["Node Type"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    return found


def _generic_plan(conn: psycopg.Connection[Any], statement: str) -> dict[str, set[str]]:
    row = conn.execute(f"EXPLAIN (GENERIC_PLAN, FORMAT JSON) {_numbered(statement)}").fetchone()
    assert row is not None
    return _scans(row[0][0]["Plan"])


@pytest.fixture
def relay_session(fresh_database: str, migrated: HandoffSettings) -> psycopg.Connection[Any]:
    """The relay's session settings, on a new database migrated to head."""
    upgrade(migrated.model_copy(update={"database_url": fresh_database}))
    conn = psycopg.connect(fresh_database, autocommit=True)
    conn.execute(q.SESSION_SETUP)
    return conn


@pytest.mark.parametrize("rows", [0, 300, 20_000])
def test_the_fetch_finds_parked_rows_through_their_index_at_any_outbox_size(
    relay_session: psycopg.Connection[Any], rows: int
) -> None:
    with relay_session as conn:
        if rows:
            conn.execute(ROWS, {"rows": rows})
        conn.execute("ANALYZE handoff.outbox")
        scans = _generic_plan(conn, q.FETCH_PENDING)
    assert scans["o"] == {"outbox_pkey"}, scans  # the range above the bound
    assert scans["p"] == {"outbox_parked"}, scans  # only the parked rows, never the outbox


def test_an_empty_analysed_outbox_is_where_the_plain_lookup_walked_the_primary_key(
    relay_session: psycopg.Connection[Any],
) -> None:
    """The condition the test above guards against is real: the lookup written plainly
    plans the primary key on exactly this outbox, and the fetch's does not."""
    assert PLAIN_LOOKUP not in q.FETCH_PENDING
    start = q.FETCH_PENDING.index("(SELECT min(p.id + 0)")
    end = q.FETCH_PENDING.index(") AS held_behind")
    plain = q.FETCH_PENDING[:start] + PLAIN_LOOKUP + q.FETCH_PENDING[end + 1 :]
    with relay_session as conn:
        conn.execute("ANALYZE handoff.outbox")
        assert _generic_plan(conn, plain)["p"] == {"outbox_pkey"}
        assert _generic_plan(conn, q.FETCH_PENDING)["p"] == {"outbox_parked"}
