"""Delegated calls on Citus: an emit outside a unit is handed whole to the worker that holds
its tenant (one round trip, one local transaction there), and what that moves to the worker
(the service lock that keeps a removal from stranding a document) moves with it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from handoff.core import effects_sql as ledger
from handoff.core import guards_sql as guards
from handoff.core.emitter import emit_as, emit_direct, own_tenant
from handoff.core.errors import ServiceInUse
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest, HandoffRequest
from handoff.core.services import remove_service
from handoff.core.settings import HandoffSettings
from handoff.core.tx import HandoffTx, transact
from handoff.migrations.citus import DELEGATED
from handoff.stack.citus import CitusCluster, CitusNode
from tests.fix_citus import on

PUSHED_DOWN = "pushing down the function call"
WAIT_S = 30


def _listening(conn: psycopg.Connection[Any]) -> list[str]:
    """Citus's planner notes about this session's statements, as they arrive."""
    notes: list[str] = []
    conn.add_notice_handler(lambda diag: notes.append(diag.message_primary or ""))
    conn.execute("SET client_min_messages = debug1")
    return notes


def _worker_of(cluster: CitusCluster, tenant: str) -> CitusNode:
    [(port,)] = on(
        cluster.coordinator.node_url("handoff"),
        "SELECT nodeport FROM citus_shards WHERE shardid ="
        " get_shard_id_for_distribution_column('handoff.document_state', %s::text)",
        tenant,
    )
    return next(w for w in cluster.workers if w.port == port)


def _create(document_id: str, owner: str) -> CreateRequest:
    return CreateRequest(
        event_id=str(uuid.uuid4()), document_id=document_id, owner=owner, status="new"
    )


def test_every_delegated_entry_point_is_distributed_by_its_tenant(cluster: CitusCluster) -> None:
    rows = on(
        cluster.coordinator.node_url("handoff"),
        "SELECT p.proname, o.distribution_argument_index, o.force_delegation,"
        "       o.colocationid = (SELECT colocationid FROM pg_dist_partition"
        "                          WHERE logicalrelid = 'handoff.document_state'::regclass)"
        "  FROM pg_dist_object o JOIN pg_proc p ON o.classid = 'pg_proc'::regclass"
        "   AND o.objid = p.oid WHERE p.proname = ANY(%s)",
        list(DELEGATED),
    )
    assert {name: (index, bool(forced), colocated) for name, index, forced, colocated in rows} == {
        name: (0, True, True) for name in DELEGATED
    }
    for worker in cluster.workers:  # each node has its own relay wake-up flag
        # (raised by a relay that went idle, lowered by the next emit there)
        assert on(worker.node_url("handoff"), "SELECT count(*) FROM handoff.relay_wakeup") == [
            (1,)
        ], worker.name


def test_an_emit_outside_a_unit_is_handed_whole_to_the_tenants_worker(
    cluster: CitusCluster,
    migrated: HandoffSettings,
    tenant_services: dict[str, Credential],
) -> None:
    creator = tenant_services["creator"]
    coordinator = cluster.coordinator.node_url("handoff")
    [(before,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    own_url = (
        f"postgresql://{creator.role}:{creator.secret}@{cluster.coordinator.address()}/handoff"
    )
    with psycopg.connect(own_url, autocommit=True) as own:
        tenant = own_tenant(own)
        notes = _listening(own)
        for i in range(6):  # past psycopg's prepare threshold (5): still delegated
            receipt = emit_direct(own, _create(f"own-{i}", "review"), tenant=tenant)
            assert receipt.version == 1 and receipt.owner == "review"
        assert notes.count(PUSHED_DOWN) == 6, notes
    with psycopg.connect(migrated.database_url, autocommit=True) as api:
        notes = _listening(api)
        for i in range(6):  # the API's path: the credential's tenant, learned once
            emit_as(api, creator, _create(f"api-{i}", "review"))
        assert notes.count(PUSHED_DOWN) == 6, notes
    [(after,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    assert after == before, "a delegated emit committed on more than one node"
    # Each emit is one transaction of the tenant's worker: its history is there.
    worker = _worker_of(cluster, tenant)
    assert on(
        worker.node_url("handoff"),
        "SELECT count(*) FROM handoff.document_history WHERE tenant_id = %s",
        tenant,
    ) == [(12,)]


def test_naming_another_tenant_reaches_nothing(
    cluster: CitusCluster, migrated: HandoffSettings, tenant_services: dict[str, Credential]
) -> None:
    creator, other = tenant_services["creator"], tenant_services["other"]
    address = cluster.coordinator.address()
    with psycopg.connect(f"postgresql://{other.role}:{other.secret}@{address}/handoff") as conn:
        other_tenant = own_tenant(conn)
    own_url = f"postgresql://{creator.role}:{creator.secret}@{address}/handoff"
    with (
        psycopg.connect(own_url) as own,
        pytest.raises(psycopg.errors.InvalidAuthorizationSpecification, match="acts in"),
    ):
        own.execute(
            "SELECT handoff.emit_direct_for(%s, 'create', 'e-x', 'created', 'd-x', NULL, "
            "NULL, 'other', 'new', NULL, NULL, NULL, NULL, NULL)",
            (other_tenant,),
        )
    with psycopg.connect(migrated.database_url, autocommit=True) as api:
        [(answer,)] = api.execute(
            "SELECT handoff.emit_http_for(%s, %s, %s, 'create', 'e-x', 'created', 'd-x', NULL, "
            "NULL, 'other', 'new', NULL, NULL, NULL, NULL, NULL)",
            (other_tenant, creator.role, creator.secret_hash),
        ).fetchall()
    assert answer["code"] == "Unauthenticated"
    assert on(
        cluster.coordinator.node_url("handoff"),
        "SELECT count(*) FROM handoff.document_state WHERE document_id = 'd-x'",
    ) == [(0,)]


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S} s: {what}")
        time.sleep(0.05)


def test_removing_a_service_waits_for_a_handoff_to_it_in_flight_on_the_worker(
    cluster: CitusCluster,
    migrated: HandoffSettings,
    admin: psycopg.Connection[Any],
    tenant_services: dict[str, Credential],
) -> None:
    """The delegated emit takes the service's lock on the tenant's worker; the removal
    must wait for it there, then see the document it now owns and refuse."""
    creator = tenant_services["creator"]
    own_url = (
        f"postgresql://{creator.role}:{creator.secret}@{cluster.coordinator.address()}/handoff"
    )
    with psycopg.connect(own_url, autocommit=True) as own:
        tenant = own_tenant(own)
        emit_direct(own, _create("held", "creator"), tenant=tenant)
    worker = _worker_of(cluster, tenant).node_url("handoff")

    def waiting() -> int:
        [(n,)] = on(worker, "SELECT count(*) FROM pg_locks WHERE NOT granted")
        return int(n)

    release = threading.Event()
    holding = threading.Event()

    def hold_the_document() -> None:  # the emit then stops inside, its service lock taken
        with psycopg.connect(migrated.database_url) as conn:
            conn.execute(
                "SELECT 1 FROM handoff.document_state WHERE tenant_id = %s"
                " AND document_id = 'held' FOR UPDATE",
                (tenant,),
            )
            holding.set()
            release.wait(WAIT_S)

    def hand_to_review() -> Any:
        with psycopg.connect(own_url, autocommit=True) as conn:
            return emit_direct(
                conn,
                HandoffRequest(
                    event_id=str(uuid.uuid4()), event_type="handed", document_id="held",
                    next_owner="review", status="handed", expected_version=1,
                ),
                tenant=tenant,
            )  # fmt: skip

    def remove_review() -> None:
        with psycopg.connect(migrated.database_url, autocommit=True) as conn:
            remove_service(conn, "review", tenant=tenant)

    with ThreadPoolExecutor(3) as pool:
        holder = pool.submit(hold_the_document)
        try:
            assert holding.wait(WAIT_S)
            emit: Future[Any] = pool.submit(hand_to_review)
            _until(lambda: waiting() >= 1, "the emit waits for the document on the worker")
            removal = pool.submit(remove_review)
            _until(lambda: waiting() >= 2, "the removal waits for the emit's service lock")
            assert not removal.done() and not emit.done()
        finally:
            release.set()
            holder.result(WAIT_S)
        assert emit.result(WAIT_S).owner == "review"
        with pytest.raises(ServiceInUse, match="still owns 1 document"):
            removal.result(WAIT_S)
    assert admin.execute(
        "SELECT count(*) FROM handoff.services WHERE tenant_id = %s AND name = 'review'",
        (tenant,),
    ).fetchone() == (1,)


APP_TABLE = """
CREATE SCHEMA IF NOT EXISTS citus_app;
CREATE TABLE IF NOT EXISTS citus_app.done (tenant_id text NOT NULL, document_id text NOT NULL);
GRANT USAGE ON SCHEMA citus_app TO handoff_service;
GRANT INSERT ON citus_app.done TO handoff_service;
-- A co-located table without a key or replica identity stops an online move of its
-- shard group (tests/citus/test_move_under_load.py moves one, docs/scaling.md).
ALTER TABLE citus_app.done REPLICA IDENTITY FULL
"""
DISTRIBUTE_APP_TABLE = """
SELECT create_distributed_table('citus_app.done', 'tenant_id',
                                colocate_with => 'handoff.document_state')
 WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition
                    WHERE logicalrelid = 'citus_app.done'::regclass)
"""


def _unit(document_id: str) -> Callable[[HandoffTx], None]:
    """A consumer's unit as the runtime sends it: the guard, the service's own write
    (as the service), an effect intent and the next emit (Handoff's functions)."""

    def work(tx: HandoffTx) -> None:
        event_id = str(uuid.uuid4())
        event = {"eventId": event_id, "fingerprint": "00",
                 "documentId": document_id, "runId": 1, "version": 1}  # fmt: skip
        guard = {"events": Jsonb([event]), "types": ["created"], "owner": None,
                 "reconcile": False}  # fmt: skip
        [(verdict, _)] = tx.execute(
            *tx.by_tenant(guards.VERDICTS, guards.VERDICTS_FOR, guard)
        ).fetchall()
        assert verdict == "apply"
        tx.execute(
            "INSERT INTO citus_app.done (tenant_id, document_id) VALUES (%s, %s)",
            (tx.tenant or _tenant_of(tx), document_id),
        )
        tx.intend(event_id=event_id, effect="charge", document_id=document_id,
                  run_id=1, request={"amount": 1})  # fmt: skip
        tx.emit(event_id=str(uuid.uuid4()), event_type="reviewed", document_id=document_id,
                next_owner="creator", status="reviewed", expected_version=1)  # fmt: skip

    return work


def _tenant_of(tx: HandoffTx) -> str:
    [(tenant, _)] = tx.conn.execute("SELECT * FROM handoff.consumer_whoami()").fetchall()
    return str(tenant)


def test_a_consumers_unit_with_its_own_write_commits_on_the_tenants_worker_alone(
    cluster: CitusCluster,
    admin: psycopg.Connection[Any],
    tenant_services: dict[str, Credential],
) -> None:
    """Every call of the unit names its tenant and is handed to the worker on the unit's
    one connection there, beside the service's own write: one node, one-phase commit.
    The same unit calling the functions without the tenant runs them on the coordinator as
    their owner, a second connection that Citus refuses beside the service's write."""
    for statement in filter(str.strip, APP_TABLE.split(";")):
        admin.execute(statement)
    admin.execute(DISTRIBUTE_APP_TABLE)
    creator, review = tenant_services["creator"], tenant_services["review"]
    address = cluster.coordinator.address()
    with psycopg.connect(f"postgresql://{creator.role}:{creator.secret}@{address}/handoff",
                         autocommit=True) as own:  # fmt: skip
        tenant = own_tenant(own)
        for doc in ("named", "unnamed"):
            emit_direct(own, _create(doc, "review"), tenant=tenant)
    coordinator = cluster.coordinator.node_url("handoff")
    [(before,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    url = f"postgresql://{review.role}:{review.secret}@{address}/handoff"
    with psycopg.connect(url, autocommit=True) as conn:
        transact(conn, _unit("named"), tenant=tenant)
        with pytest.raises(psycopg.Error, match="different user"):
            transact(conn, _unit("unnamed"))
    [(after,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    assert after == before, "the unit committed on more than one node (two-phase commit)"
    assert admin.execute(
        "SELECT owner, version FROM handoff.document_state WHERE tenant_id = %s"
        " AND document_id = 'named'",
        (tenant,),
    ).fetchone() == ("creator", 2)
    assert admin.execute(
        "SELECT count(*) FROM citus_app.done WHERE tenant_id = %s", (tenant,)
    ).fetchone() == (1,)


def test_the_executors_claim_and_record_are_handed_whole_to_the_tenants_worker(
    cluster: CitusCluster, tenant_services: dict[str, Credential]
) -> None:
    """An effect intent claimed, marked about to be sent and recorded, as an executor
    does (consumers/executor.py: each call in a transaction of its own): each call names
    the tenant and is pushed down, and nothing commits with two phases. (Inside a
    transaction block Citus refuses an INSERT ... SELECT in a pushed-down function.)"""
    review = tenant_services["review"]
    url = f"postgresql://{review.role}:{review.secret}@{cluster.coordinator.address()}/handoff"
    coordinator = cluster.coordinator.node_url("handoff")
    [(before,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    with psycopg.connect(url, autocommit=True) as conn:
        tenant = own_tenant(conn)
        transact(conn, lambda tx: tx.intend(event_id="e-1", effect="charge", document_id="d-1",
                                           run_id=1, request={"amount": 1}),
                 tenant=tenant)  # fmt: skip
        notes = _listening(conn)
        claim = {"tenant": tenant, "worker": "w", "lease_s": 30.0, "limit": 1, "submit": False}
        with conn.transaction():
            [row] = conn.execute(ledger.CLAIM_FOR, claim).fetchall()
        intent, claimed = row[0], row[7]
        key = {"tenant": tenant, "id": intent, "claim": claimed}
        with conn.transaction():
            assert conn.execute(ledger.SUBMITTING_FOR, key).fetchone() == (True,)
        record = {**key, "state": "succeeded", "reconciliation": None, "provider_ref": "p-1",
                  "outcome": Jsonb({"ok": True}), "error": None, "retry_in_s": 0.0,
                  "lookup_failed": False, "detail": None}  # fmt: skip
        with conn.transaction():
            assert conn.execute(ledger.RECORD_FOR, record).fetchone() == (True,)
        # In a transaction block Citus says "pushing down function call in a
        # multi-statement transaction".
        assert sum(note.startswith("pushing down function call") for note in notes) == 3, notes
    [(after,)] = on(coordinator, "SELECT count(*) FROM pg_dist_transaction")
    assert after == before, "an executor's call committed on more than one node"
    worker = _worker_of(cluster, tenant)
    assert on(worker.node_url("handoff"),
              "SELECT state, provider_ref FROM handoff.effect_intents WHERE tenant_id = %s",
              tenant) == [("succeeded", "p-1")]  # fmt: skip
