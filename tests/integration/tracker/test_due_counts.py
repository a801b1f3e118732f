"""Deadline counters under concurrent handoffs while the tracker folds passed hours."""

from __future__ import annotations

import random
import threading
import uuid
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg

from handoff.core import errors
from handoff.core.client import HandoffClient
from tests.fix_contract import ServiceFactory, owner_and_version

OWNERS = ("a", "b", "c")

# What the tracker answers, computed the tracker's way (passed hours + the current hour)...
BY_COUNTERS = """
SELECT o.owner,
       coalesce((SELECT sum(n) FROM handoff.owner_due_counts c
                  WHERE c.tenant_id = %(t)s AND c.owner = o.owner
                    AND c.due_hour < handoff._due_bucket(now())), 0)
       + (SELECT count(*) FROM handoff.document_state s
           WHERE s.tenant_id = %(t)s AND s.owner = o.owner
             AND s.due_at >= handoff._due_bucket(now()) AND s.due_at < now())
  FROM unnest(%(owners)s::text[]) AS o (owner)
"""
# ...and by scanning every document.
BY_SCAN = """
SELECT o.owner, (SELECT count(*) FROM handoff.document_state s
                  WHERE s.tenant_id = %(t)s AND s.owner = o.owner AND s.due_at < now())
  FROM unnest(%(owners)s::text[]) AS o (owner)
"""


def test_folding_during_crossing_handoffs_keeps_overdue_exact(
    service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str, migrated: Any
) -> None:
    creds = {name: service(name, can_create=True) for name in OWNERS}
    docs = [f"d{i}" for i in range(12)]
    now = datetime.now(UTC)
    with HandoffClient.direct(creds["a"], migrated.database_url, pool_size=1) as a:
        for i, doc in enumerate(docs):
            a.create(
                event_id=str(uuid.uuid4()),
                document_id=doc,
                owner="a",
                status="s",
                due_at=now - timedelta(hours=i),  # many passed hours to fold
            )
    stop = threading.Event()
    unexpected: list[BaseException] = []
    folds = {"done": 0, "deadlocked": 0}

    def fold() -> None:
        with psycopg.connect(migrated.database_url, autocommit=True) as conn:
            while not stop.is_set():
                try:
                    conn.execute("SELECT handoff.fold_due_counts()")
                    folds["done"] += 1
                except pg.DeadlockDetected:
                    folds["deadlocked"] += 1  # the tracker retries next minute

    def work(seed: int) -> None:
        rng = random.Random(seed)
        clients = {
            n: HandoffClient.direct(c, migrated.database_url, pool_size=1) for n, c in creds.items()
        }
        try:
            with psycopg.connect(migrated.database_url, autocommit=True) as look:
                for _ in range(80):
                    doc = rng.choice(docs)
                    owner, version = owner_and_version(look, tenant, doc)
                    # Losing a race is the contract working.
                    with suppress(errors.VersionMismatch, errors.OwnershipMismatch):
                        clients[owner].emit(
                            event_id=str(uuid.uuid4()),
                            event_type="move",
                            document_id=doc,
                            next_owner=rng.choice(OWNERS),
                            status="s",
                            expected_version=version,
                            due_at=datetime.now(UTC) + timedelta(hours=rng.randint(-5, 2)),
                        )
        except BaseException as exc:
            unexpected.append(exc)
        finally:
            for client in clients.values():
                client.close()

    folder = threading.Thread(target=fold)
    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    folder.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=300)
    stop.set()
    folder.join(timeout=30)
    assert not unexpected, unexpected[:3]
    assert folds["done"] > 0
    params = {"t": tenant, "owners": list(OWNERS)}
    assert (
        admin.execute(BY_COUNTERS, params).fetchall() == admin.execute(BY_SCAN, params).fetchall()
    )
    # Folded: every passed hour of this tenant is one -infinity row per owner.
    passed = admin.execute(
        "SELECT count(*) FROM handoff.owner_due_counts WHERE tenant_id = %s "
        "AND due_hour > '-infinity' AND due_hour < handoff._due_bucket(now()) - interval '1 hour'",
        (tenant,),
    ).fetchone()
    admin.execute("SELECT handoff.fold_due_counts()")
    left = admin.execute(
        "SELECT count(*) FROM handoff.owner_due_counts WHERE tenant_id = %s "
        "AND due_hour > '-infinity' AND due_hour < handoff._due_bucket(now())",
        (tenant,),
    ).fetchone()
    assert left == (0,), passed
    assert (
        admin.execute(BY_COUNTERS, params).fetchall() == admin.execute(BY_SCAN, params).fetchall()
    )
