"""The relay on Citus: it marks what it published, keeps a document's versions in order
even where a later version holds a lower id, and hears an emit on any worker.

The rest of the relay's guarantees (several relays, SIGKILL mid-batch and after the
ack, a crash of the database, a broker outage, parked rows) are the shared suite's,
tests/integration/relay/test_relay.py, which make test-citus runs here too.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from handoff.core.settings import HandoffSettings
from handoff.stack.citus import CitusCluster
from handoff.stack.procs import wait_until
from tests.fix_citus import on
from tests.fix_contract import ServiceFactory
from tests.fix_relay import Relays, Workload, consume, first_seen_versions, pending


def test_published_rows_are_marked_and_the_pending_view_counts_the_unmarked(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
) -> None:  # fmt: skip
    workload.run(docs=3, steps=3, threads=1, prefix="mark")
    assert pending(admin, tenant) == 9
    assert relays.run_once().returncode == 0
    assert pending(admin, tenant) == 0
    row = admin.execute(
        "SELECT count(*), count(published_at) FROM handoff.outbox WHERE tenant_id = %s",
        (tenant,),
    ).fetchone()
    assert row == (9, 9)


def test_a_later_version_with_a_lower_id_waits_for_the_earlier_one(
    relays: Relays, workload: Workload, cluster: CitusCluster, tenant: str,
    migrated: HandoffSettings,
) -> None:  # fmt: skip
    """Ids come from the sequence of the node that inserts: after a shard move, or an
    insert through the coordinator, a document's next version can hold a lower id than
    its last. Made here by hand: version 1's row is written again with an id above
    version 2's, so id order and version order disagree."""
    workload.run(docs=1, steps=2, threads=1, prefix="inverted")
    superuser = cluster.coordinator.node_url("handoff")
    [(high,)] = on(superuser, "SELECT max(id) + 1000 FROM handoff.outbox")
    on(
        superuser,
        "WITH old AS (DELETE FROM handoff.outbox WHERE tenant_id = %s AND version = 1"
        " RETURNING *)"
        " INSERT INTO handoff.outbox (id, tenant_id, document_id, run_id, version, event_id,"
        "                             event_type, payload, created_at)"
        " OVERRIDING SYSTEM VALUE"
        " SELECT %s, tenant_id, document_id, run_id, version, event_id, event_type, payload,"
        "        created_at FROM old RETURNING id",
        tenant,
        high,
    )
    ordered = on(
        superuser,
        "SELECT version FROM handoff.outbox WHERE tenant_id = %s ORDER BY id",
        tenant,
    )
    assert ordered == [(2,), (1,)]  # id order says version 2 first
    assert relays.run_once().returncode == 0
    events = consume(migrated, relays.topic, tenant, lambda e: len(e.get("inverted-0", [])) >= 2)
    assert [e["version"] for e in events["inverted-0"]] == [1, 2]
    assert first_seen_versions(events["inverted-0"]) == [1, 2]


def test_an_idle_relay_hears_an_emit_on_any_worker(
    relays: Relays, service: ServiceFactory, cluster: CitusCluster, migrated: HandoffSettings,
    admin: psycopg.Connection[Any],
) -> None:  # fmt: skip
    """Its own session is on the coordinator; an emit runs on its tenant's worker and
    notifies there. With a poll of a minute, only a wake-up publishes within it."""
    superuser = cluster.coordinator.node_url("handoff")
    by_worker: dict[int, str] = {}
    for n in range(64):  # a tenant on each worker
        tenant = f"wake-{n}-{time.monotonic_ns() % 10**8}"
        [(port,)] = on(
            superuser,
            "SELECT nodeport FROM citus_shards WHERE shardid ="
            " get_shard_id_for_distribution_column('handoff.document_state', %s::text)",
            tenant,
        )
        by_worker.setdefault(port, tenant)
        if len(by_worker) == len(cluster.workers):
            break
    assert len(by_worker) == len(cluster.workers)
    relays.start(poll_interval_s="60")
    for tenant in by_worker.values():
        # idle first: the relay has raised every worker's flag and waits
        assert wait_until(lambda: _flags_raised(cluster), 30, 0.1), "a worker's flag stayed down"
        creator = Workload(_in(service, tenant), migrated)
        try:
            creator.run(docs=1, steps=1, threads=1, prefix="wake")
        finally:
            creator.close()
        assert wait_until(lambda t=tenant: pending(admin, t) == 0, 20, 0.1), (
            f"an emit of {tenant} waited for the relay's minute-long poll"
        )


def _flags_raised(cluster: CitusCluster) -> bool:
    return all(
        on(w.node_url("handoff"), "SELECT waiting FROM handoff.relay_wakeup") == [(True,)]
        for w in cluster.workers
    )


def _in(service: ServiceFactory, tenant: str) -> ServiceFactory:
    def make(name: str, *, can_create: bool = False, in_tenant: str | None = None) -> Any:
        return service(name, can_create=can_create, in_tenant=in_tenant or tenant)

    return make
