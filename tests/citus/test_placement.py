"""Handoff on a Citus coordinator and its workers (``make test-citus``): where every table
and function lives, the roles on every node, what a service can do on any node, and that
a tenant's unit stays on one worker without two-phase commit.

The rest of the Citus suite is the ordinary suites (the emit contract, the guard, the
ledger, the rehearsal, the audit) run against this stack: the Makefile names them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from handoff.migrations.citus import COORDINATOR, DISTRIBUTED, REFERENCE
from handoff.stack.citus import CitusCluster
from handoff.stack.local import LocalStack
from tests.fix_citus import on
from tests.fix_contract import ServiceFactory


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


def test_the_recovery_budget_counts_the_relays_arrivals_across_workers(
    local_stack: LocalStack, service: ServiceFactory, migrated: HandoffSettings, tenant: str
) -> None:
    """Arrivals on Citus are the rows created in the window (ids are per node): 30 emits
    made while ``handoff backlog`` measures are 30 arrivals, and, with no relay running,
    all of them still waiting."""
    maker = service("maker", can_create=True)
    measuring = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "backlog", "--window", "6", "--json",
         "--tenant", tenant],
        env={**os.environ, "HANDOFF_HOME": str(local_stack.layout.home)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert measuring.stderr is not None
        said = ""
        while "measuring for" not in said:  # the brokers' line first, then this one
            line = measuring.stderr.readline()
            assert line, said
            said += line
        before = on(migrated.database_url, "SELECT count(*) FROM handoff.outbox_pending")[0][0]
        time.sleep(1.0)  # inside the window, whose first snapshot follows that line
        with HandoffClient.direct(maker, migrated.database_url, pool_size=1) as client:
            for i in range(30):
                client.create(event_id=f"b{i}-c", document_id=f"b{i}", owner="maker",
                              status="new")  # fmt: skip
    except BaseException:
        measuring.kill()
        measuring.communicate()
        raise
    out, err = measuring.communicate(timeout=120)
    assert measuring.returncode == 0, err[-2000:]
    relay = next(b for b in json.loads(out) if b["name"] == "relay")
    seconds = 30 / relay["arrival_per_s"] if relay["arrival_per_s"] else 0.0
    assert 5.5 <= seconds <= 9.0, relay  # 30 arrivals over a window of a little over 6 s
    assert relay["backlog"] >= before + 30 and relay["completion_per_s"] == 0, relay


def test_a_rebalance_of_balanced_workers_moves_nothing(local_stack: LocalStack) -> None:
    def rebalance() -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "handoff.cli", "db", "rebalance", "--json"],
            env={**os.environ, "HANDOFF_HOME": str(local_stack.layout.home)},
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    rebalance()  # whatever earlier tests' moves left uneven (a tenant isolated, moved)
    answer = rebalance()
    assert answer["job"] is None and answer["moves"] == 0, answer
    assert answer["before"] == answer["after"] and len(answer["after"]) >= 2, answer


def test_a_rebalance_refuses_a_table_whose_shards_cannot_move_online(
    local_stack: LocalStack, migrated: HandoffSettings, cluster: CitusCluster
) -> None:
    """A user's table co-located with Handoff's, without a primary key or a replica
    identity: Citus could not move its shard group online, so the rebalance says which
    table and what to add before it moves anything; given one, it runs."""

    def rebalance() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "handoff.cli", "db", "rebalance", "--json"],
            env={**os.environ, "HANDOFF_HOME": str(local_stack.layout.home)},
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS placement_test")
        conn.execute("CREATE TABLE placement_test.notes (tenant_id text NOT NULL, note text)")
        try:
            conn.execute(
                "SELECT create_distributed_table('placement_test.notes', 'tenant_id',"
                " colocate_with => 'handoff.document_state')"
            )
            refused = rebalance()
            assert refused.returncode != 0, refused.stdout
            said = " ".join((refused.stdout + refused.stderr).split())
            assert "placement_test.notes has neither a primary key nor a replica identity" in said
            assert "REPLICA IDENTITY FULL" in said and "Traceback" not in said, said

            conn.execute("ALTER TABLE placement_test.notes REPLICA IDENTITY FULL")
            done = rebalance()
            assert done.returncode == 0, done.stderr[-2000:]
        finally:
            conn.execute("DROP TABLE placement_test.notes")


def test_stack_up_forgets_the_cleanup_records_of_a_worker_removed_before_they_were_dropped(
    cluster: CitusCluster,
) -> None:
    """A worker removed with a move's leftover shard not yet dropped (as remove() did before
    it waited) leaves a cleanup record Citus never drops, and Citus refuses every later
    move of that shard while it stays: the next stack up deletes it."""
    coordinator = cluster.coordinator.node_url("handoff")
    (gone,) = on(coordinator, "SELECT coalesce(max(groupid), 0) + 1000 FROM pg_dist_node")[0]
    on(
        coordinator,
        "INSERT INTO pg_dist_cleanup (record_id, operation_id, object_type, object_name,"
        "                             node_group_id, policy_type)"
        " VALUES (nextval('pg_dist_cleanup_recordid_seq'), 0, 1,"
        "         'handoff.document_state_999999', %s, 1) RETURNING record_id",
        gone,
    )
    assert cluster.stranded_cleanups() == 1
    cluster.bootstrap()  # what handoff stack up runs on a running Citus stack
    assert cluster.stranded_cleanups() == 0
