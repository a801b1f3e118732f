"""The schema's IMMUTABLE SQL functions are inlined where they are called, and
handoff._micros (the outbox payload's instants) gives each accepted instant's
microseconds since the epoch, exactly.

Inlined matters on the emit's path: a call that is not inlined runs its body as a
query with an executor of its own, on every emit (handoff/sql/contract.sql, above
_micros). PostgreSQL inlines an IMMUTABLE SQL function only if its body is immutable
too, so a body that calls one STABLE function loses it without any error.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoff.core.models import EARLIEST, LATEST
from handoff.core.settings import HandoffSettings

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

IMMUTABLE_SQL = """
    SELECT p.proname, array_agg(format_type(t, NULL) ORDER BY n)
      FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang,
           unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, n)
     WHERE p.pronamespace = 'handoff'::regnamespace
       AND l.lanname = 'sql' AND p.provolatile = 'i' AND p.prokind = 'f'
     GROUP BY p.proname
"""


def _micros(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(microseconds=1)


def test_every_immutable_sql_function_is_inlined(migrated: HandoffSettings) -> None:
    with psycopg.connect(migrated.database_url) as conn:
        functions: list[tuple[str, list[str]]] = conn.execute(IMMUTABLE_SQL).fetchall()
        assert any(name == "_micros" for name, _ in functions), functions
        not_inlined = []
        for name, types in functions:
            # Arguments from a table's columns, not constants: an immutable call of
            # constants is folded to its value whether it was inlined or not.
            columns = ", ".join(f"a{n} {t}" for n, t in enumerate(types))
            conn.execute(f"CREATE TEMP TABLE args_{name} ({columns})")
            call = f"handoff.{name}({', '.join(f'a{n}' for n in range(len(types)))})"
            plan = conn.execute(f"EXPLAIN VERBOSE SELECT {call} FROM args_{name}").fetchall()
            # The plan names the function (schema-qualified or not) only if it stayed a call.
            if any(re.search(rf"\b{name}\(", line) for (line,) in plan):
                not_inlined.append(name)
        conn.rollback()
    assert not_inlined == [], f"not inlined where called: {not_inlined}"


def test_micros_at_the_edges_of_the_accepted_range(migrated: HandoffSettings) -> None:
    edges = [
        EARLIEST,
        LATEST,
        EPOCH,
        EPOCH - timedelta(microseconds=1),
        EPOCH + timedelta(microseconds=1),
    ]
    with psycopg.connect(migrated.database_url) as conn:
        for instant in edges:
            got = conn.execute("SELECT handoff._micros(%s)", [instant]).fetchone()
            assert got == (_micros(instant),), instant
        assert conn.execute("SELECT handoff._micros(NULL)").fetchone() == (None,)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    instant=st.datetimes(
        min_value=EARLIEST.replace(tzinfo=None) + timedelta(days=1),
        max_value=LATEST.replace(tzinfo=None) - timedelta(days=1),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=-14)), timezone(timedelta(hours=5, minutes=45))]
        ),
    )
)
def test_micros_of_any_accepted_instant(migrated: HandoffSettings, instant: datetime) -> None:
    with psycopg.connect(migrated.database_url) as conn:
        # The session's time zone must not matter: the value is an instant's.
        conn.execute("SET TIME ZONE 'Pacific/Kiritimati'")
        got: tuple[Any, ...] | None = conn.execute(
            "SELECT handoff._micros(%s)", [instant]
        ).fetchone()
    assert got == (_micros(instant),)
