"""Handoff on a Citus coordinator and its workers (``make test-citus``): where every table
and function lives, the roles on every node, what a service can do on any node, and that
a tenant's unit stays on one worker without two-phase commit.

The rest of the Citus suite is the ordinary suites (the emit contract, the guard, the
ledger, the rehearsal, the audit) run against this stack: the Makefile names them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.migrations.citus import COORDINATOR, DISTRIBUTED, REFERENCE
from handoff.stack.citus import CitusCluster
from handoff.stack.local import LocalStack
from tests.fix_citus import on


def test_the_workers_are_in_and_every_table_is_placed_as_decided(cluster: CitusCluster) -> None:
    coordinator = cluster.coordinator.node_url("handoff")
    assert cluster.workers_active() == len(cluster.workers) >= 2
    placed = dict(
        on(
            coordinator,
            "SELECT c.relname, p.partmethod FROM pg_dist_partition p"
            "  JOIN pg_class c ON c.oid = p.logicalrelid"
            " WHERE c.relnamespace = 'handoff'::regnamespace",
        )
    )
    assert {t: placed.get(t) for t in DISTRIBUTED} == dict.fromkeys(DISTRIBUTED, "h")
    assert {t: placed.get(t) for t in REFERENCE} == dict.fromkeys(REFERENCE, "n")
    # The coordinator's own tables are not spread (Citus-local at most: method n, no shards
    # elsewhere).
    assert not {t for t in COORDINATOR if placed.get(t) == "h"}
    colocations = on(
        coordinator,
        "SELECT count(DISTINCT colocationid) FROM pg_dist_partition p"
        "  JOIN pg_class c ON c.oid = p.logicalrelid"
        " WHERE c.relnamespace = 'handoff'::regnamespace AND p.partmethod = 'h'",
    )
    assert colocations == [(1,)], "every tenant table is co-located with document_state"


def test_every_function_and_role_is_on_every_worker(cluster: CitusCluster) -> None:
    functions = "SELECT count(*) FROM pg_proc WHERE pronamespace = 'handoff'::regnamespace"
    roles = (
        "SELECT rolname, rolcanlogin FROM pg_roles"
        " WHERE rolname IN ('handoff', 'handoff_service', 'handoff_reader') ORDER BY 1"
    )
    [(expected,)] = on(cluster.coordinator.node_url("handoff"), functions)
    want_roles = on(cluster.coordinator.node_url("handoff"), roles)
    for worker in cluster.workers:
        assert on(worker.node_url("handoff"), functions) == [(expected,)], worker.name
        assert on(worker.node_url("handoff"), roles) == want_roles, worker.name


def test_a_service_on_any_node_proves_its_role_and_reads_no_table(
    cluster: CitusCluster, tenant_services: dict[str, Credential]
) -> None:
    creator = tenant_services["creator"]
    with HandoffClient.direct(creator, cluster.coordinator.app_url()) as client:
        client.create(event_id="e-1", document_id="d-1", owner="review", status="new")
    for node in cluster.nodes:
        own = f"postgresql://{creator.role}:{creator.secret}@{node.address()}/handoff"
        with psycopg.connect(own, autocommit=True) as conn:  # its own password: in
            for table in ("document_state", "outbox", "services"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(f"SELECT * FROM handoff.{table} LIMIT 1")
        with pytest.raises(psycopg.OperationalError, match="password authentication"):
            psycopg.connect(f"postgresql://{creator.role}:wrong@{node.address()}/handoff")
        # The reader role may open the coordinator's connections through the private
        # socket folder, but over TCP nobody logs in as it: it has no password.
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(f"postgresql://handoff_reader:x@{node.address()}/handoff")


def test_a_tenants_unit_stays_on_one_worker_without_two_phase_commit(
    cluster: CitusCluster, tenant_services: dict[str, Credential], admin: psycopg.Connection[Any]
) -> None:
    coordinator = cluster.coordinator.node_url("handoff")
    [(before,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    creator, review = tenant_services["creator"], tenant_services["review"]
    url = cluster.coordinator.app_url()
    with HandoffClient.direct(creator, url) as first, HandoffClient.direct(review, url) as next_:
        for i in range(20):
            receipt = first.create(
                event_id=f"c-{i}", document_id=f"doc-{i}", owner="review", status="new"
            )
            next_.emit(
                event_id=f"h-{i}", event_type="handed", document_id=f"doc-{i}",
                next_owner="creator", status="handed", expected_version=receipt.version,
            )  # fmt: skip
    [(after,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    assert after == before, "an emit committed on more than one node (two-phase commit)"
    [(tenant,)] = on(
        coordinator, "SELECT tenant_id FROM handoff.services WHERE db_role = %s", creator.role
    )
    assert on(
        coordinator, "SELECT count(*) FROM handoff.document_history WHERE tenant_id = %s", tenant
    ) == [(40,)]
    placements = on(
        coordinator,
        "SELECT nodeport FROM citus_shards WHERE shardid ="
        " get_shard_id_for_distribution_column('handoff.document_history', %s::text)",
        tenant,
    )
    assert len(placements) == 1 and placements[0][0] in {w.port for w in cluster.workers}


def test_the_recovery_budget_reads_the_consumers_and_says_why_not_the_relay(
    local_stack: LocalStack,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "backlog", "--window", "1"],
        env={**os.environ, "HANDOFF_HOME": str(local_stack.layout.home), "COLUMNS": "300"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the relay is not measured on Citus" in done.stderr  # with the progress lines
    assert "recovery budget" in done.stdout
