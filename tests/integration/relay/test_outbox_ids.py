"""An outbox row's id is drawn after its transaction has its xid, whoever writes it.

The relay's proof that no late commit is skipped (handoff/relay/cursor.py) rests
on it: a writer that drew its id before it had its xid could be passed by the
bound while still open, and its row never published (bench peer once lost one
row so). Migration 0031_outbox_xid_first makes the column's default take the
xid first. These tests watch the order from a BEFORE INSERT trigger, which runs
after the row's defaults and before the heap insert that would assign the xid.

nextval itself takes an xid when it writes the sequence to the WAL, once in 32
ids (and on its first call after a checkpoint), so each test inserts several
times: an id drawn before the xid shows on most of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from alembic import command

from handoff.core.settings import HandoffSettings
from handoff.stack.migrate import alembic_config, upgrade

# Records, as the row is about to be stored, whether its transaction had an xid.
WATCH = """
CREATE FUNCTION {schema}.xid_at_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('watch.xid_at_row',
                       coalesce(pg_current_xact_id_if_assigned()::text, 'none'), true);
    RETURN NEW;
END $$;
CREATE TRIGGER xid_at_row BEFORE INSERT ON {table}
    FOR EACH ROW EXECUTE FUNCTION {schema}.xid_at_row();
"""

ROW = """
INSERT INTO handoff.outbox (tenant_id, document_id, run_id, version, event_id, event_type, payload)
VALUES ('ids', 'doc-1', 1, %(version)s, 'ids-' || %(version)s, 'handed', '{}') RETURNING id
"""


@pytest.fixture
def database(fresh_database: str, migrated: HandoffSettings) -> Iterator[str]:
    """A new database migrated to head (a trigger on its outbox disturbs no other test)."""
    upgrade(migrated.model_copy(update={"database_url": fresh_database}))
    yield fresh_database


TRIES = 6


def _xid_at_row(
    conn: psycopg.Connection[Any], statement: str, params: dict[str, Any] | None = None
) -> list[str]:
    """Runs ``statement`` TRIES times, each as its transaction's first write, and says
    what the trigger saw each time."""
    seen = []
    for _ in range(TRIES):
        with conn.transaction():
            assert conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone() == (None,)
            conn.execute(statement, params)
            row = conn.execute("SELECT current_setting('watch.xid_at_row')").fetchone()
        assert row is not None
        seen.append(str(row[0]))
    return seen


def test_a_row_that_is_its_transactions_first_write_has_its_xid_before_its_id(
    database: str,
) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(WATCH.format(schema="handoff", table="handoff.outbox"))
        one = _xid_at_row(conn, ROW, {"version": 1})
        assert "none" not in one, f"a row was built before its transaction had an xid: {one}"
        # bench peer's multi-row fill: the trigger runs for every row, the first included
        many = _xid_at_row(
            conn,
            "INSERT INTO handoff.outbox (tenant_id, document_id, run_id, version, event_id,"
            " event_type, payload) SELECT 'ids', 'doc-2', 1, g, 'many-' || g, 'handed', '{}'"
            " FROM generate_series(1, 3) AS g",
        )
        assert "none" not in many, many


def test_the_watch_sees_an_id_drawn_before_the_xid(database: str) -> None:
    """The check above can fail: an identity column, as the outbox had before 0031, draws
    its id before the transaction has an xid, and the same trigger says so."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA control")
        conn.execute(
            "CREATE TABLE control.outbox (id bigint GENERATED ALWAYS AS IDENTITY, note text)"
        )
        conn.execute(WATCH.format(schema="control", table="control.outbox"))
        seen = _xid_at_row(conn, "INSERT INTO control.outbox (note) VALUES ('x')")
        assert seen.count("none") >= TRIES - 2, seen  # nextval's WAL write, a checkpoint


def test_ids_go_on_from_where_they_were_across_the_upgrade_and_its_downgrade(
    database: str, migrated: HandoffSettings
) -> None:
    config = alembic_config(migrated.model_copy(update={"database_url": database}))
    with psycopg.connect(database, autocommit=True) as conn:

        def next_id(version: int) -> int:
            row = conn.execute(ROW, {"version": version}).fetchone()
            assert row is not None
            return int(row[0])

        command.downgrade(config, "0030_claim_one")
        before = [next_id(v) for v in (1, 2, 3)]
        command.upgrade(config, "0031_outbox_xid_first")
        after = next_id(4)
        command.downgrade(config, "0030_claim_one")
        down = next_id(5)
        command.upgrade(config, "head")
        assert before == sorted(before) and before[-1] < after < down < next_id(6)
