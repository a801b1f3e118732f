"""The relay on the real stack: completeness, order, several relays, crashes, outages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest

from handoff.core.calls import Calls
from handoff.core.emitter import Request, emit_direct
from handoff.core.kafka import UNREACHABLE
from handoff.core.models import Receipt
from handoff.core.settings import HandoffSettings
from handoff.relay.kafka_io import register_schemas
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.fix_citus import ON_CITUS
from tests.fix_contract import ServiceFactory, login
from tests.fix_relay import (
    Relays,
    Workload,
    assert_complete_and_ordered,
    consume,
    first_seen_versions,
    pending,
    slot_holders,
    slots_held,
    wait_published,
)


def test_three_relays_publish_every_version_in_order(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings,
) -> None:  # fmt: skip
    relays.start()
    assert wait_until(lambda: slots_held(admin) == 256, 30)  # the first takes every slot
    emitting = threading.Thread(target=workload.run, args=(24, 15))
    emitting.start()
    relays.start()
    relays.start()
    # late joiners get a fair share: the first gives slots up between batches
    assert wait_until(lambda: slot_holders(admin) == 3, 30), "three relays never shared slots"
    relays.procs[0].kill()  # the others must take its slots over
    relays.procs[0].wait(10)
    assert wait_until(lambda: slot_holders(admin) == 2, 30)
    emitting.join()
    wait_published(admin, tenant)
    events = consume(migrated, relays.topic, tenant, workload.complete)
    assert_complete_and_ordered(events, workload.versions)
    assert all(p.poll() is None for p in relays.procs[1:]), "a surviving relay died"
    # Each survivor takes its share of the dead relay's slots at its next rebalance,
    # between its batches (a make test-citus run once counted 212 of 256 right here).
    assert wait_until(lambda: slots_held(admin) == 256, 30), slots_held(admin)


class _OnConnection(Calls[Receipt]):
    """Emits on one connection, in whatever transaction it has open."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def _send(self, request: Request, document_id: str | None = None) -> Receipt:
        return emit_direct(self.conn, request, document_id)


def test_a_long_transaction_does_not_hold_the_bound_and_an_open_emit_does(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings, service: ServiceFactory,
) -> None:  # fmt: skip
    def relay_log(n: int) -> str:
        return (relays.logs / f"relay-{relays.topic}-{n}.log").read_text()

    # A report with a transaction id, open throughout: the bound passes it anyway
    # (the relay asks who holds the outbox's insert lock once the xid proof stalls).
    with psycopg.connect(migrated.database_url) as report:
        report.execute("SELECT pg_current_xact_id()")
        workload.run(docs=3, steps=3, threads=1, prefix="long")
        assert relays.run_once().returncode == 0
        assert pending(admin, tenant) == 0
        assert "open transaction holds" not in relay_log(0)
        report.rollback()
    # An emit left open holds the bound below its row, rightly; what committed
    # after it is published all the same, and --once exits without waiting for it.
    holder = service("holder", can_create=True)
    # No relay waits: the open emit does not take the wake-up row (which would
    # hold every later waking emit until it ends).
    admin.execute("UPDATE handoff.relay_wakeup SET waiting = false")
    with login(migrated, holder.role, holder.secret) as conn:
        conn.autocommit = False
        _OnConnection(conn).create(
            event_id=str(uuid.uuid4()), document_id="open-1", owner="holder", status="new"
        )
        workload.run(docs=2, steps=2, threads=1, prefix="after")
        assert relays.run_once().returncode == 0
        if not ON_CITUS:  # on Citus the relay marks rows: no bound for it to hold
            assert "open transaction holds the outbox bound" in relay_log(1)
            assert pending(admin, tenant) > 0
        conn.commit()
    events = consume(migrated, relays.topic, tenant, lambda e: {"after-0", "after-1"} <= set(e))
    assert first_seen_versions(events["after-1"]) == [1, 2]
    assert relays.run_once().returncode == 0
    assert pending(admin, tenant) == 0
    events = consume(migrated, relays.topic, tenant, lambda e: "open-1" in e)
    assert first_seen_versions(events["open-1"]) == [1]


def test_consumer_gets_the_full_envelope(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings,
) -> None:  # fmt: skip
    workload.run(docs=1, steps=3, threads=1, prefix="env")
    workload.clients["alpha"].emit(
        event_id="finish-env-0",
        event_type="finished",
        document_id="env-0",
        next_owner=None,
        status="done",
        expected_version=3,
    )
    workload.versions["env-0"] = 4
    assert relays.run_once().returncode == 0
    events = consume(migrated, relays.topic, tenant, workload.complete)["env-0"]
    second, last = events[1], events[3]
    assert second["eventType"] == "handed" and second["source"] == "alpha"
    assert (second["owner"], second["previousOwner"], second["status"]) == (
        "beta",
        "alpha",
        "step-1",
    )
    assert isinstance(second["occurredAt"], datetime) and isinstance(second["assignedAt"], datetime)
    assert json.loads(second["data"]) == {"step": 1}
    assert (second["tenantId"], second["runId"], second["schemaVersion"]) == (tenant, 1, 2)
    assert last["completed"] and last["owner"] is None and last["completedAt"] is not None
    assert last["eventId"] == "finish-env-0"
    handoffs_own = {
        k: v for k, v in second["_headers"].items() if k != "content-type" and k[:3] != "ce_"
    }
    assert handoffs_own == {
        "eventId": second["eventId"].encode(),  # deduplicate without decoding
        "eventType": b"handed",
        "owner": b"beta",
        "tenant": tenant.encode(),
        "version": b"2",
    }  # and the CloudEvents attributes (test_cloudevents.py)
    assert second["_key"] == f"{tenant}/env-0".encode()


@pytest.mark.slow
def test_kill_9_mid_batch_loses_nothing(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings,
) -> None:  # fmt: skip
    emitting = threading.Thread(target=workload.run, args=(20, 30))
    emitting.start()
    kills = 0
    while emitting.is_alive() or pending(admin, tenant) or kills < 3:
        relay = relays.start(batch_size="50")
        # Killed once it publishes (its start-up alone takes about a second).
        log = relays.logs / f"relay-{relays.topic}-{len(relays.procs) - 1}.log"
        wait_until(lambda log=log: log.exists() and "registered" in log.read_text(), 20, 0.05)
        time.sleep(0.1 + 0.2 * (kills % 3))
        relay.kill()  # SIGKILL, wherever it is
        relay.wait(10)
        kills += 1
        if kills > 40:
            break
    emitting.join()
    relays.start()
    wait_published(admin, tenant)
    events = consume(migrated, relays.topic, tenant, workload.complete)
    assert kills >= 3
    assert_complete_and_ordered(events, workload.versions)


@pytest.mark.slow
def test_kill_9_after_ack_before_mark_republishes_same_event_ids(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings,
) -> None:  # fmt: skip
    workload.run(docs=5, steps=4, threads=1, prefix="ack")
    crashed = relays.start(module="tests.relay_faults")  # killed by its after-ack hook
    assert crashed.wait(60) == -9  # killed by SIGKILL right after the broker's ack
    assert pending(admin, tenant) > 0  # in Kafka, but not marked
    assert relays.run_once().returncode == 0
    wait_published(admin, tenant)
    events = consume(migrated, relays.topic, tenant, workload.complete)
    assert_complete_and_ordered(events, workload.versions)
    ids = [e["eventId"] for doc in events.values() for e in doc]
    assert len(ids) > len(set(ids)), "the acked batch should have been published twice"


@pytest.mark.disruptive
def test_a_crash_of_postgres_under_a_running_relay_loses_nothing(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings, local_stack: LocalStack,
) -> None:  # fmt: skip
    """The relay's marks are asynchronous commits (core/outbox_sql.py SESSION_SETUP): a
    crash of the database may lose the last of them. Those rows go out again, in their
    order; none is skipped."""
    workload.run(docs=40, steps=25, threads=2, prefix="crash")
    total = pending(admin, tenant)
    admin.close()
    relays.start(batch_size="20")
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        assert wait_until(lambda: pending(conn, tenant) < total * 0.7, 60, 0.05)
    local_stack.postgres.crash()  # mid-stream, marks in flight
    local_stack.up(["postgres"])
    with psycopg.connect(migrated.database_url, autocommit=True) as again:
        wait_published(again, tenant)
    events = consume(migrated, relays.topic, tenant, workload.complete)
    assert_complete_and_ordered(events, workload.versions)
    assert relays.procs[-1].poll() is None, "the relay should have reconnected, not exited"
    ids = [e["eventId"] for doc in events.values() for e in doc]
    print(f"{len(ids) - len(set(ids))} events published again after the crash")


@pytest.mark.slow
def test_broker_outage_delays_but_loses_nothing(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings, local_stack: LocalStack,
) -> None:  # fmt: skip
    relay = relays.start(delivery_timeout_s="3", max_backoff_s="1")
    workload.run(docs=6, steps=5, threads=2, prefix="before")
    wait_published(admin, tenant)
    local_stack.down(["kafka"])
    try:
        workload.run(docs=6, steps=5, threads=2, prefix="during")
        time.sleep(5)  # the relay keeps trying while the outbox holds the rows
        assert pending(admin, tenant) == 6 * 5
        assert relay.poll() is None
    finally:
        local_stack.up(["kafka"])
    wait_published(admin, tenant, timeout=180)
    events = consume(migrated, relays.topic, tenant, workload.complete, timeout=90)
    assert_complete_and_ordered(events, workload.versions)
    # The outage is logged as one: when it began and when it ended, no line per attempt.
    log = (relays.logs / f"relay-{relays.topic}-0.log").read_text()
    assert log.count("Kafka unavailable") == 1, log[-3000:]
    assert re.search(r"Kafka is back after [0-9.]+ s", log), log[-3000:]
    noise = [line for line in log.splitlines() if " handoff.relay.kafka " in line
             and " INFO " not in line and UNREACHABLE.search(line)]  # fmt: skip
    assert not noise and "MSG_TIMED_OUT" not in log, log[-3000:]


def test_unencodable_row_is_parked_and_holds_back_only_its_document(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    workload.run(docs=2, steps=4, threads=1, prefix="park")
    # version 2 of park-0 loses a required field: it cannot be written as an event
    admin.execute(
        "UPDATE handoff.outbox SET payload = payload - 'status' "
        "WHERE tenant_id = %s AND document_id = 'park-0' AND version = 2",
        (tenant,),
    )
    monkeypatch.setenv("HANDOFF_LOG_FORMAT", "json")
    assert relays.run_once().returncode == 0
    monkeypatch.delenv("HANDOFF_LOG_FORMAT")
    # Its log is JSON lines, and the parking names the row's tenant, document and event.
    lines = (relays.logs / f"relay-{relays.topic}-0.log").read_text().splitlines()
    assert not [line for line in lines if TEXT_LOG_LINE.match(line)], lines
    records = [json.loads(line) for line in lines if line.startswith("{")]
    parking = [r for r in records if r["message"].startswith("parking outbox row")]
    assert len(parking) == 1 and parking[0]["level"] == "ERROR", records
    assert (parking[0]["tenant"], parking[0]["documentId"]) == (tenant, "park-0")
    assert parking[0]["eventId"] and parking[0]["outboxId"] > 0
    parked = admin.execute(
        "SELECT document_id, version, park_reason FROM handoff.outbox WHERE tenant_id = %s "
        "AND parked_at IS NOT NULL ORDER BY id",
        (tenant,),
    ).fetchall()
    # The rows behind it are parked too (held), so that the slot's bound passes them.
    assert [(d, v) for d, v, _ in parked] == [("park-0", 2), ("park-0", 3), ("park-0", 4)]
    assert "status" in parked[0][2] and all("held behind" in r for _, _, r in parked[1:])
    assert pending(admin, tenant) == 3  # parked, not published
    events = consume(
        migrated, relays.topic, tenant, lambda e: len(e.get("park-1", [])) >= 4 and "park-0" in e
    )
    assert first_seen_versions(events["park-1"]) == [1, 2, 3, 4]
    assert first_seen_versions(events["park-0"]) == [1]

    # Repaired and unparked, the document's rows go out again, in their order.
    nothing = _outbox_cli("unpark", tenant, "park-1", "--yes")
    assert nothing.returncode == 1 and "has no parked outbox row" in nothing.stderr
    listed = _outbox_cli("parked", "--tenant", tenant, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["version"] for r in json.loads(listed.stdout)] == [2, 3, 4]
    admin.execute(
        'UPDATE handoff.outbox SET payload = payload || \'{"status": "s"}\' '
        "WHERE tenant_id = %s AND document_id = 'park-0' AND version = 2",
        (tenant,),
    )
    done = _outbox_cli("unpark", tenant, "park-0", "--yes")
    assert done.returncode == 0 and "3 parked row(s) unparked" in done.stderr, done.stderr
    assert relays.run_once().returncode == 0
    assert pending(admin, tenant) == 0
    events = consume(migrated, relays.topic, tenant, lambda e: len(e.get("park-0", [])) >= 4)
    assert first_seen_versions(events["park-0"]) == [1, 2, 3, 4]


TEXT_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")


def _outbox_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", "outbox", *args],
        capture_output=True, text=True, timeout=60, check=False, env=os.environ.copy(),
    )  # fmt: skip


def test_metrics_retention_and_routing(
    relays: Relays, workload: Workload, admin: psycopg.Connection[Any], tenant: str,
    migrated: HandoffSettings, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    routed = f"{relays.topic}.approved"
    port = 18600 + uuid.uuid4().int % 300
    # The relay purges no sooner than the retention table allows either: both set short.
    windows = admin.execute("SELECT replay_window, outbox FROM handoff.retention").fetchone()
    admin.execute("UPDATE handoff.retention SET replay_window = interval '1 second', "
                  "outbox = interval '1 second'")  # fmt: skip
    request.addfinalizer(lambda: admin.execute(
        "UPDATE handoff.retention SET outbox = %s, replay_window = %s", windows[::-1]))  # fmt: skip
    relays.start(
        "--metrics-port",
        str(port),
        routes=json.dumps([{"event_type": "approved", "topic": routed}]),
        retention_hours=str(1 / 3600),  # one second
        purge_interval_s="0.5",
        metrics_interval_s="0.5",
    )
    workload.run(docs=3, steps=6, threads=1, prefix="route")
    assert wait_until(
        lambda: (
            admin.execute(
                "SELECT count(*) FROM handoff.outbox WHERE tenant_id = %s", (tenant,)
            ).fetchone()
            == (0,)
        ),
        60,
    ), "published rows were not purged after the retention window"
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    metrics = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("handoff_relay_") and " " in line
    }
    assert metrics["handoff_relay_published_total"] >= 18
    assert metrics["handoff_relay_purged_total"] >= 18
    assert "handoff_relay_backlog_rows" in metrics
    assert "handoff_relay_oldest_unpublished_age_seconds" in metrics
    assert metrics["handoff_relay_slots_owned"] > 0
    approved = consume(migrated, routed, tenant, lambda e: sum(map(len, e.values())) >= 3)
    assert {e["eventType"] for doc in approved.values() for e in doc} == {"approved"}
    assert sorted(e["version"] for doc in approved.values() for e in doc) == [6, 6, 6]


def test_relays_starting_together_on_a_new_subject_all_register_it(
    migrated: HandoffSettings,
) -> None:
    """Relays started at once race to create a new subject's compatibility rule; the
    registry answers the loser 409 (a relay of the broker-loss test died of it)."""
    subjects = [f"test.register.{uuid.uuid4().hex[:8]}" for _ in range(3)]
    results: list[dict[str, int]] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(6)

    def register() -> None:
        barrier.wait()
        try:
            results.append(register_schemas(migrated.schema_registry_url, subjects)[1])
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=register) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert len(results) == 6 and all(r == results[0] for r in results), results
    assert set(results[0]) == set(subjects)
