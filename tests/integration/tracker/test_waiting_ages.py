"""Waiting ages (p50/p90/max per owner) from the per-hour counters equal the ones a
full scan computes, through loads, handoffs, finishes and the minute fold."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from handoff.core.identity import Credential
from handoff.tracker import read_model as reads
from handoff.tracker.read_model import ReadModel
from handoff.tracker.read_sql import FOLD_ASSIGNED_COUNTS
from tests.fix_contract import ServiceFactory

LOAD = """
INSERT INTO handoff.document_state (tenant_id, document_id, run_id, owner, status, version,
                                    assigned_at, created_at, updated_at)
SELECT %(tenant)s, 'doc-' || g, 1, CASE WHEN g %% 3 = 0 THEN 'b' ELSE 'a' END, 'waiting', 1,
       now() - random() * interval '5 days', now(), now()
  FROM generate_series(1, %(n)s) AS g
"""

EXACT = """
SELECT now() - (SELECT assigned_at FROM handoff.document_state
                 WHERE tenant_id = %(tenant)s AND owner = %(owner)s
                 ORDER BY assigned_at, document_id
                OFFSET floor((c.n - 1) * %(q)s)::bigint LIMIT 1)
  FROM (SELECT count(*) AS n FROM handoff.document_state
         WHERE tenant_id = %(tenant)s AND owner = %(owner)s) c
"""


def _ages(settings: Any, viewer: Credential, owner: str) -> tuple[Any, Any, Any]:
    async def read() -> tuple[Any, Any, Any]:
        async with AsyncConnectionPool(
            settings.database_url, min_size=1, max_size=1, kwargs={"autocommit": True},
            open=False,
        ) as pool:  # fmt: skip
            found = await ReadModel(pool).one(viewer, reads.owner_ages(owner))
        return found.p50, found.p90, found.oldest

    return asyncio.run(read())


def _exact(admin: psycopg.Connection[Any], tenant: str, owner: str) -> tuple[Any, ...]:
    # One transaction: now() is the same for the three, as in the read.
    with admin.transaction():
        return tuple(
            admin.execute(EXACT, {"tenant": tenant, "owner": owner, "q": q}).fetchone()[0]  # type: ignore[index]
            for q in (0.5, 0.1, 0.0)
        )


def _close(found: tuple[Any, ...], exact: tuple[Any, ...]) -> bool:
    # The read and the scan run at slightly different now(): ages agree within a second.
    return all(abs(a - b) < timedelta(seconds=1) for a, b in zip(found, exact, strict=True))


def test_ages_match_a_full_scan_through_moves_and_folds(
    admin: psycopg.Connection[Any], tenant: str, service: ServiceFactory, migrated: Any
) -> None:
    viewer = service("viewer")
    admin.execute(LOAD, {"tenant": tenant, "n": 3000})
    for owner in ("a", "b"):
        assert _close(_ages(migrated, viewer, owner), _exact(admin, tenant, owner))
    # Handoffs (a -> b), finishes (some of b), and the fold of passed hours.
    admin.execute(
        "UPDATE handoff.document_state SET owner = 'b', assigned_at = now() - interval '3 h'"
        " WHERE tenant_id = %s AND document_id LIKE 'doc-1%%' AND owner = 'a'",
        (tenant,),
    )
    admin.execute(
        "UPDATE handoff.document_state SET owner = NULL, completed_at = now()"
        " WHERE tenant_id = %s AND document_id LIKE 'doc-2%%' AND owner = 'b'",
        (tenant,),
    )
    admin.execute(FOLD_ASSIGNED_COUNTS)
    for owner in ("a", "b"):
        assert _close(_ages(migrated, viewer, owner), _exact(admin, tenant, owner))
    shards = admin.execute(
        "SELECT count(*) FROM handoff.owner_assigned_counts WHERE tenant_id = %s"
        " AND assigned_hour < date_trunc('hour', now()) AND shard <> 0",
        (tenant,),
    ).fetchone()
    assert shards == (0,)  # folded into shard 0
    assert _ages(migrated, viewer, "nobody") == (None, None, None)
