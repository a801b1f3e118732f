"""Executors as processes: a kill -9 after submitting is recovered when the lease runs
out (by a lookup, one charge), and several executors in several processes, fed by a
real ``handoff consume`` reading Kafka, perform every intent exactly once."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from handoff.core.kafka import ensure_topics
from handoff.core.settings import HandoffSettings
from handoff.rehearsal.orders import PAYMENTS
from handoff.rehearsal.rows import Rehearsal
from handoff.relay.kafka_io import headers
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.fix_effects import SandboxProcess, env_for

ROOT = Path(__file__).resolve().parents[3]


class Procs:
    def __init__(self, settings: HandoffSettings, rehearsal: Rehearsal, sandbox: SandboxProcess,
                 logs: Path) -> None:  # fmt: skip
        self.env = env_for(
            settings,
            HANDOFF_CONSUMER_CREDENTIAL=rehearsal.creds[PAYMENTS].token,
            HANDOFF_SANDBOX_URL=sandbox.url,
            HANDOFF_EFFECTS_RETRY_BASE_S="0.05",
            HANDOFF_EFFECTS_POLL_S="0.2",
        )
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"effects-{len(self.procs)}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "handoff.cli", *args],
                env={**self.env, **env},
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def log(self, index: int) -> str:
        return (self.logs / f"effects-{index}.log").read_text()

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def procs(
    migrated: HandoffSettings, rehearsal: Rehearsal, sandbox: SandboxProcess, tmp_path: Path
) -> Iterator[Procs]:
    found = Procs(migrated, rehearsal, sandbox, tmp_path)
    try:
        yield found
    finally:
        found.kill_all()


def _state(r: Rehearsal, doc: str) -> tuple[Any, ...]:
    row = r.admin.execute(
        "SELECT state, reconciliation FROM handoff.effect_intents "
        "WHERE tenant_id = %s AND document_id = %s",
        (r.tenant, doc),
    ).fetchone()
    return tuple(row) if row else ()


def test_a_killed_executors_claim_is_recovered_after_its_lease_with_one_charge(
    rehearsal: Rehearsal, sandbox: SandboxProcess, procs: Procs
) -> None:
    doc, payload = rehearsal.order()
    assert rehearsal.processor().run_one(rehearsal.item(payload)) == "apply"
    lease = {"HANDOFF_EFFECTS_LEASE_S": "2"}
    hung = procs.start("effects", "run", "tests.effect_apps:app",
                       TEST_EFFECTS_HANG_AFTER_SUBMIT="1", **lease)  # fmt: skip
    assert wait_until(lambda: len(sandbox.payments(doc)) == 1, 30), procs.log(0)
    assert _state(rehearsal, doc) == ("submitted", "none")
    hung.kill()  # kill -9 between the provider's answer and its record
    hung.wait(10)
    procs.start("effects", "run", "tests.effect_apps:app", **lease)
    assert wait_until(lambda: _state(rehearsal, doc)[:1] == ("succeeded",), 30), procs.log(1)
    ev = rehearsal.evidence(doc)
    [intent] = ev["intents"]
    assert intent["reconciliation"] == "reconciled" and intent["attempts"] == 1
    assert len(ev["provider_records"]) == 1
    assert intent["provider_ref"] == ev["provider_records"][0]["id"]
    assert any("expired" in (h["detail"] or "") for h in ev["intent_history"])
    assert ev["order"][0]["status"] == "paid"


def test_answers_recorded_without_waiting_survive_a_kill_9_each_intent_paid_once(
    rehearsal: Rehearsal, sandbox: SandboxProcess, procs: Procs
) -> None:
    """An effect with nothing after its answer: executors queue their answers and go on
    (consumers/records.py record_later). Killed mid-run, answers not yet recorded are
    looked up once their leases run out: every intent succeeds, each paid once."""
    docs = []
    for n in range(120):
        doc, payload = rehearsal.order(amount=100 + n)
        assert rehearsal.processor().run_one(rehearsal.item(payload)) == "apply"
        docs.append(doc)
    env = {"HANDOFF_EFFECTS_LEASE_S": "2", "TEST_EFFECTS_SUBMIT_S": "0.02"}
    run = ("effects", "run", "tests.effect_apps:record_only", "--executors", "8")
    first = procs.start(*run, **env)

    def succeeded() -> int:
        row = rehearsal.admin.execute(
            "SELECT count(*) FROM handoff.effect_intents WHERE tenant_id = %s"
            " AND consumer = %s AND state = 'succeeded'",
            (rehearsal.tenant, PAYMENTS),
        ).fetchone()
        return int(row[0]) if row else 0

    assert wait_until(lambda: succeeded() >= 20, 60, 0.01), procs.log(0)[-3000:]
    first.kill()  # answers queued or in a record call, intents claimed ahead
    first.wait(10)
    assert succeeded() < len(docs), "killed after the run was over: nothing was tested"
    procs.start(*run, **env)
    assert wait_until(lambda: succeeded() == len(docs), 90), procs.log(1)[-3000:]
    looked_up = 0
    for doc in docs:
        ev = rehearsal.evidence(doc)
        [charge] = ev["provider_records"]  # paid once, whatever the kill interrupted
        [intent] = ev["intents"]
        assert intent["provider_ref"] == charge["id"]
        # A claim the kill cut short came back after its lease and was looked up first:
        # found (its answer had not been recorded), or absent and sent again (a second
        # attempt with the same key, never a second charge).
        looked_up += intent["reconciliation"] == "reconciled"
        assert intent["attempts"] == 1 or intent["reconciliation"] == "reconciled", intent
    assert looked_up > 0, "the kill left no claim to recover"


def test_several_executors_in_several_processes_perform_each_intent_once(
    migrated: HandoffSettings, rehearsal: Rehearsal, sandbox: SandboxProcess, procs: Procs
) -> None:
    topic = f"test.effects.{uuid.uuid4().hex[:8]}"
    ensure_topics(migrated.kafka_bootstrap, [topic], 3)
    orders = [rehearsal.order(amount=100 + n) for n in range(40)]
    producer = Producer({"bootstrap.servers": migrated.kafka_bootstrap})
    for doc, payload in orders:
        value = rehearsal.item(payload).position.value
        producer.produce(topic, value, doc.encode(), headers=headers(payload))
    assert producer.flush(30) == 0
    # One consumer process with two executors, and an executor-only process with two more.
    procs.start("consume", "tests.effect_apps:app", "--topic", topic, "--executors", "2",
                "--batch-size", "10")  # fmt: skip
    procs.start("effects", "run", "tests.effect_apps:app", "--executors", "2")

    def all_paid() -> bool:
        row = rehearsal.admin.execute(
            "SELECT count(*) FROM handoff.document_state WHERE tenant_id = %s AND status = 'paid'",
            (rehearsal.tenant,),
        ).fetchone()
        return row is not None and row[0] == len(orders)

    assert wait_until(all_paid, 90), procs.log(0)[-3000:] + procs.log(1)[-3000:]
    workers = set()
    for doc, _ in orders:
        ev = rehearsal.evidence(doc)
        [charge] = ev["provider_records"]
        [intent] = ev["intents"]
        assert charge["idempotencyKey"] == intent["idempotency_key"]
        claims = [h for h in ev["intent_history"] if h["from_state"] == "intended"]
        assert [c["to_state"] for c in claims] == ["submitted"]  # taken once, sent once
        workers.add(claims[0]["actor"])
    assert len(workers) > 1  # the work was shared


@pytest.mark.disruptive
def test_executors_ride_a_database_restart_logged_as_one_outage(
    rehearsal: Rehearsal, sandbox: SandboxProcess, procs: Procs, local_stack: LocalStack
) -> None:
    """PostgreSQL restarts under busy executors (the provider answers slowly): they
    reconnect by themselves, every intent is performed once, and the outage is one line
    when it begins and one when it ends, not a traceback per executor and attempt."""
    orders = [rehearsal.order(amount=300 + n) for n in range(8)]
    for doc, payload in orders:
        sandbox.arm(kind="delay", reference=doc, delayMs=800)
        assert rehearsal.processor().run_one(rehearsal.item(payload)) == "apply"
    procs.start("effects", "run", "tests.effect_apps:app", "--executors", "3")
    assert wait_until(lambda: any(sandbox.payments(doc) for doc, _ in orders), 30), procs.log(0)
    rehearsal.admin.close()
    local_stack.down(["postgres"])
    time.sleep(3)  # the executors keep trying meanwhile
    local_stack.up(["postgres"])
    with psycopg.connect(local_stack.env()["HANDOFF_DATABASE_URL"], autocommit=True) as admin:

        def done() -> bool:
            rows = admin.execute(
                "SELECT count(*) FROM handoff.effect_intents WHERE tenant_id = %s "
                "AND state = 'succeeded'", (rehearsal.tenant,),
            ).fetchone()  # fmt: skip
            return rows == (len(orders),)

        assert wait_until(done, 90), procs.log(0)
    assert all(len(sandbox.payments(doc)) == 1 for doc, _ in orders)
    log = procs.log(0)
    assert "Traceback" not in log, log[-3000:]
    assert log.count("the database (effect executors) unavailable") == 1, log[-3000:]
    assert re.search(r"the database \(effect executors\) is back after [0-9.]+ s", log), log


def test_an_idle_executor_is_woken_by_a_new_intent_not_by_its_poll(
    rehearsal: Rehearsal, sandbox: SandboxProcess, procs: Procs
) -> None:
    """With a poll of a minute, an intent written while the executor waits is performed
    within seconds: its notification wakes it. On Citus the intent is written (and its
    notification sent) on the tenant's worker, where the executor listens too."""
    procs.start("effects", "run", "tests.effect_apps:app", HANDOFF_EFFECTS_POLL_S="60")
    assert wait_until(lambda: "executor(s) started" in procs.log(0), 30), procs.log(0)
    time.sleep(2.0)  # its first claim found nothing; it waits now
    doc, payload = rehearsal.order()
    began = time.monotonic()
    assert rehearsal.processor().run_one(rehearsal.item(payload)) == "apply"
    assert wait_until(lambda: _state(rehearsal, doc)[:1] == ("succeeded",), 20), procs.log(0)
    assert time.monotonic() - began < 20 and len(sandbox.payments(doc)) == 1
