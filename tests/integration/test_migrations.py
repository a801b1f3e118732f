"""Every revision undoes what it did: on a new database, upgraded one revision at a
time, each downgrade leaves the schema (tables, columns, indexes, constraints,
policies, grants, functions, triggers) as it was below that revision."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from handoff.core.settings import HandoffSettings
from handoff.migrations import citus
from handoff.stack.migrate import alembic_config

# What a revision's SQL creates, in a form to compare.
SCHEMA = {
    "columns": """SELECT table_name, column_name, data_type, is_nullable, column_default
                    FROM information_schema.columns WHERE table_schema = 'handoff'""",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'handoff'",
    "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
                        FROM pg_constraint WHERE connamespace = 'handoff'::regnamespace""",
    "policies": """SELECT tablename, policyname, roles::text, qual, with_check
                     FROM pg_policies WHERE schemaname = 'handoff'""",
    # Effective grants, so that a NULL ACL (the defaults) equals the owner-only
    # list a GRANT and its REVOKE leave behind.
    "grants": """SELECT c.relname, a.grantee::regrole::text, a.privilege_type
                   FROM pg_class c,
                        aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
                  WHERE c.relnamespace = 'handoff'::regnamespace AND a.grantee <> c.relowner""",
    "function grants": """SELECT p.oid::regprocedure::text, a.grantee, a.privilege_type
                            FROM pg_proc p,
                                 aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                           WHERE p.pronamespace = 'handoff'::regnamespace
                             AND a.grantee <> p.proowner""",
    "functions": """SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
                      FROM pg_proc p WHERE p.pronamespace = 'handoff'::regnamespace""",
    "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
                     FROM pg_trigger WHERE NOT tgisinternal
                      AND tgrelid IN (SELECT oid FROM pg_class
                                       WHERE relnamespace = 'handoff'::regnamespace)""",
}


# What a downgrade keeps on purpose, by the object (a row's first field) it keeps.
KEPT: dict[tuple[str, str], tuple[str, ...]] = {
    # The services' lifecycle columns stay, and the credential checks that read
    # them (no revocation is undone by a downgrade: 0003_hardening.down.sql).
    ("0003_hardening", "columns"): ("services",),
    ("0003_hardening", "functions"): ("emit_direct(", "emit_http(", "reader_session("),
    # emit_direct keeps its 0004 body (0004_consumers.down.sql).
    ("0004_consumers", "functions"): ("emit_direct(",),
}


def _compared(rows: list[tuple[Any, ...]], kept: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [row for row in rows if not str(row[0]).startswith(kept)]


def schema(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        if conn.execute("SELECT to_regnamespace('handoff')").fetchone() == (None,):
            return {}
        return {what: sorted(conn.execute(query).fetchall()) for what, query in SCHEMA.items()}


@pytest.mark.slow
def test_every_revision_downgrades_to_the_schema_below_it(
    fresh_database: str, migrated: HandoffSettings
) -> None:
    settings = migrated.model_copy(update={"database_url": fresh_database})
    config = alembic_config(settings)
    revisions = [r.revision for r in ScriptDirectory.from_config(config).walk_revisions()]
    revisions.reverse()  # oldest first
    assert len(revisions) >= 15, revisions

    below: list[dict[str, list[tuple[Any, ...]]]] = [schema(fresh_database)]
    for revision in revisions:
        try:
            command.upgrade(config, revision)
        except Exception as exc:
            raise AssertionError(f"the upgrade to {revision} failed: {exc}") from exc
        below.append(schema(fresh_database))
    assert below[-1]["functions"], "the upgrade created no functions"

    kept_below: dict[str, tuple[str, ...]] = {}
    for step in range(len(revisions) - 1, -1, -1):
        revision = revisions[step]
        try:
            command.downgrade(config, "-1")
        except Exception as exc:
            raise AssertionError(f"the downgrade of {revision} failed: {exc}") from exc
        now, expected = schema(fresh_database), below[step]
        for what in SCHEMA if expected else ():
            # kept stays kept below the revision that kept it
            kept = kept_below[what] = kept_below.get(what, ()) + KEPT.get((revision, what), ())
            assert _compared(now[what], kept) == _compared(expected[what], kept), (
                f"the downgrade of {revision} left {what} other than before it:\n"
                f"  more: {sorted(set(now[what]) - set(expected[what]))[:5]}\n"
                f"  fewer: {sorted(set(expected[what]) - set(now[what]))[:5]}"
            )
        if not expected:
            assert now == {}, "the first revision's downgrade left the schema"

    command.upgrade(config, "head")
    assert schema(fresh_database) == below[-1], "up again, the schema differs from the first"


def test_every_table_has_a_placement_on_citus(migrated: HandoffSettings) -> None:
    """A new table needs a decision in handoff/migrations/citus.py; on Citus the upgrade
    stops without one, so this catches it on a lone server already."""
    with psycopg.connect(migrated.database_url) as conn:
        tables = {row[0] for row in conn.execute(citus.TABLES).fetchall()}
    assert tables and not citus.undecided(tables)
