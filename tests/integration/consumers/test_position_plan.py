"""The guard's position lookup reads the position index whatever the statistics say.

A consumer's session plans consumer_begin's statements on the statistics the
guard table has when the session starts. On a table analysed while it held
nothing of this consumer (a new install, a new tenant, the next run after a
purge), both of the table's btree indexes that start with (tenant, consumer)
look equally good for "this document's newest guard row", and PostgreSQL took
the primary key: every probe then walked all of the consumer's guard rows,
sorting what matched (a batch of 500 events went from 13 ms to over a
second as the table grew). These tests make that table, in a database of
their own, and count the buffers a call reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.stack.migrate import upgrade

TENANT, CONSUMER = "plans", "reader"
GUARDS = 20_000  # the consumer's guard rows already there

FILL = """
INSERT INTO handoff.consumer_guards (tenant_id, consumer, event_id, fingerprint, document_id,
                                     run_id, version)
SELECT %(tenant)s, %(consumer)s, 'old-' || g, '\\x00', 'old-doc-' || g, 1, 1
  FROM generate_series(1, %(rows)s) AS g
"""
BEGIN = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT * FROM handoff.consumer_begin(%(events)s, ARRAY['created'], NULL, false)
"""


@pytest.fixture
def stale_guards(fresh_database: str, migrated: HandoffSettings) -> Iterator[str]:
    """A database at head whose guard table was analysed before the consumer's rows came:
    the consumer's login URL."""
    upgrade(migrated.model_copy(update={"database_url": fresh_database}))
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        cred = add_service(conn, CONSUMER, tenant=TENANT)
        conn.execute("ANALYZE handoff.consumer_guards")
        conn.execute(FILL, {"tenant": TENANT, "consumer": CONSUMER, "rows": GUARDS})
    yield make_conninfo(fresh_database, user=cred.role, password=cred.secret)


def _batch(first: int, events: int) -> Jsonb:
    return Jsonb([{"eventId": f"new-{n}", "fingerprint": "aa", "documentId": f"doc-{n}",
                   "runId": 1, "version": 1} for n in range(first, first + events)])  # fmt: skip


def _buffers_per_event(url: str, events: int) -> float:
    """Shared buffers a consumer_begin call reads, per event, in a new session.

    The session's first call (its plans made, the catalogs read) is not the one counted.
    """
    with psycopg.connect(url) as conn:
        for first in (0, events):
            row = conn.execute(BEGIN, {"events": _batch(first, events)}).fetchone()
        conn.rollback()
    assert row is not None
    plan: dict[str, Any] = row[0][0]["Plan"]
    return float(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]) / events


@pytest.mark.parametrize("events", [1, 200], ids=["one event", "a batch"])
def test_the_position_lookup_does_not_walk_the_consumers_guard_rows(
    stale_guards: str, events: int
) -> None:
    # An index probe is a few buffers; the walk was one or more per guard row.
    # (Measured: 40 for one event, 5 an event in a batch; the walk read 4,100-4,200.)
    per_event = _buffers_per_event(stale_guards, events)
    assert per_event < 100, per_event
