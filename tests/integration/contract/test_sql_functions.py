"""handoff/sql holds every function as the upgraded database holds it: applying the
family files to a database at head changes no definition, and every function of the
schema is in exactly one of them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from handoff.core.settings import HandoffSettings

FAMILIES = Path(__file__).resolve().parents[3] / "handoff" / "sql"
DEFINED = re.compile(r"^CREATE OR REPLACE FUNCTION handoff\.(\w+)\(", re.M)

# Everything a CREATE OR REPLACE can change: the text, the signature and result, the
# language, volatility, security, the SET clauses (search_path), grants kept or not.
DEFINITIONS = """
    SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl::text, p.proowner
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'handoff'
     ORDER BY 1
"""


def definitions(conn: psycopg.Connection[Any]) -> dict[str, tuple[Any, ...]]:
    return {row[0]: row[1:] for row in conn.execute(DEFINITIONS)}


def family_files() -> dict[str, str]:
    return {path.stem: path.read_text() for path in sorted(FAMILIES.glob("*.sql"))}


def test_every_function_of_the_schema_is_in_exactly_one_family_file(
    migrated: HandoffSettings,
) -> None:
    named = Counter(name for text in family_files().values() for name in DEFINED.findall(text))
    assert named, f"no CREATE OR REPLACE FUNCTION in {FAMILIES}"
    twice = sorted(name for name, n in named.items() if n > 1)
    assert not twice, f"defined in more than one place in handoff/sql: {twice}"
    with psycopg.connect(migrated.database_url) as conn:
        in_database = {
            signature.split("(")[0].removeprefix("handoff.") for signature in definitions(conn)
        }
    assert in_database - set(named) == set(), "functions no family file holds"
    assert set(named) - in_database == set(), "family files define functions the schema lacks"


def test_the_family_files_are_the_definitions_the_upgraded_database_holds(
    migrated: HandoffSettings,
) -> None:
    with psycopg.connect(migrated.database_url) as conn:
        before = definitions(conn)
        for family, text in family_files().items():
            try:
                conn.execute(text.encode())
            except psycopg.Error as exc:
                raise AssertionError(f"handoff/sql/{family}.sql does not apply: {exc}") from exc
        after = definitions(conn)
        conn.rollback()  # only compared, never kept
    assert set(after) == set(before), "applying the files added functions (a changed signature?)"
    changed = {
        signature: (before[signature][0], after[signature][0])
        for signature in before
        if before[signature] != after[signature]
    }
    assert not changed, "the files differ from the database in:\n" + "\n".join(
        f"{signature}\n--- database\n{was}\n--- file\n{now}"
        for signature, (was, now) in changed.items()
    )
