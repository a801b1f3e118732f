"""``handoff replay`` on the real stack (Kafka, registry, PostgreSQL, real processes): a
plan's revision approved and enforced; a run stopped mid-way (within a second) and resumed
with nothing applied twice; outcomes that reconcile to the authorised set; capabilities
the manifest does not list recorded as skipped, never performed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from handoff.consumers import Consumer, Event
from handoff.consumers.providers import SandboxPayments
from handoff.core import HandoffClient, HandoffTx
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from handoff.operate import replay
from handoff.stack.procs import wait_until
from tests.fix_consumer import Wire, effects, payloads
from tests.fix_contract import ServiceFactory

APP = "tests.consumer_apps:app"


def _cli(cred: Credential, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", "replay", *args],
        capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, "HANDOFF_CONSUMER_CREDENTIAL": cred.token,
             "TEST_CONSUMER_NAME": "review", **env},
    )  # fmt: skip


def _plan(cred: Credential, name: str, tenant: str, topic: str, *more: str) -> str:
    done = _cli(cred, "plan", name, "--app", APP, "--tenant", tenant, "--topic", topic,
                "--failure-class", "handler_error", "--expected-effect", "one effect row each",
                "--owner", "ops-team", *more)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # The revision alone on stdout (for a script to approve exactly it), as on stderr.
    revision = done.stdout.strip()
    assert re.fullmatch(r"\w{16}", revision), done.stdout
    assert f"revision {revision}" in done.stderr
    return revision


@pytest.fixture
def invoices(
    service: ServiceFactory, migrated: HandoffSettings, wire: Wire, admin: psycopg.Connection[Any],
    tenant: str,
) -> tuple[Credential, list[str]]:  # fmt: skip
    """30 documents created for review, their events on the wire topic."""
    maker, review = service("maker", can_create=True), service("review")
    docs = [f"inv-{i:02d}" for i in range(30)]
    with HandoffClient.direct(maker, migrated.database_url, pool_size=1) as client:
        for doc in docs:
            client.create(event_id=f"{doc}-c", document_id=doc, owner="review", status="new")
    for (doc, _run, _version), payload in sorted(payloads(admin, tenant).items()):
        wire.produce(wire.encode(payload), key=doc, event_type="created", owner="review",
                     tenant=tenant)  # fmt: skip
    return review, docs


def test_a_plan_runs_only_as_approved(
    invoices: tuple[Credential, list[str]], wire: Wire, tenant: str
) -> None:
    review, _ = invoices
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    revision = _plan(review, "r-approve", tenant, wire.topic, "--since", since)
    unapproved = _cli(review, "run", "r-approve", "--app", APP)
    assert unapproved.returncode == 1 and "is not approved" in unapproved.stderr
    wrong = _cli(review, "approve", "r-approve", "--revision", "0" * 16)
    assert wrong.returncode == 1 and f"is at revision {revision}" in wrong.stderr
    assert (
        _cli(review, "approve", "r-approve", "--revision", revision, "--by", "alice").returncode
        == 0
    )
    # A changed plan is a new revision: the approval does not carry over.
    changed = _plan(review, "r-approve", tenant, wire.topic, "--since", since, "--rate", "5")
    assert changed != revision
    again = _cli(review, "run", "r-approve", "--app", APP)
    assert again.returncode == 1 and "is not approved" in again.stderr
    assert _cli(review, "approve", "r-approve", "--revision", changed).returncode == 0
    other = _cli(review, "run", "r-approve", "--app", APP, TEST_CONSUMER_VERSION="2")
    assert other.returncode == 1 and "handler revision" in other.stderr
    shown = _cli(review, "show", "r-approve")
    assert f"revision {changed}" in shown.stdout
    # The trail keeps who approved which revision: alice approved the first one only.
    assert re.search(rf"alice\s*│\s*approved\s*│\s*{revision}", shown.stdout)
    as_json = json.loads(_cli(review, "show", "r-approve", "--json").stdout)
    assert (as_json["revision"], as_json["approvedRevision"]) == (changed, changed)
    assert {"alice"} <= {a["actor"] for a in as_json["audit"]}


def test_a_replay_stopped_mid_run_resumes_with_nothing_applied_twice(
    invoices: tuple[Credential, list[str]], wire: Wire, tenant: str,
    admin: psycopg.Connection[Any],
) -> None:  # fmt: skip
    review, docs = invoices
    # First, the first ten by event id (the plan finds them through the outbox).
    ids = [f"{doc}-c" for doc in docs[:10]]
    by_id = [arg for i in ids for arg in ("--event-id", i)]
    first = _plan(review, "r-first", tenant, wire.topic, *by_id)
    assert _cli(review, "approve", "r-first", "--revision", first).returncode == 0
    done = _cli(review, "run", "r-first", "--app", APP)
    assert done.returncode == 0, done.stderr
    assert len(effects(admin, tenant)) == 10
    status = _cli(review, "status", "r-first")
    assert re.search(r"completed\s*│\s*10", status.stdout) and "reconciled" in status.stderr
    as_json = json.loads(_cli(review, "status", "r-first", "--json").stdout)
    assert as_json["outcomes"]["completed"] == 10 and as_json["reconciled"] is True

    # Then everything, slowly, stopped mid-way and resumed.
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    revision = _plan(review, "r-all", tenant, wire.topic, "--since", since, "--rate", "8",
                     "--exclude", f"{docs[-1]}-c")  # fmt: skip
    assert _cli(review, "approve", "r-all", "--revision", revision).returncode == 0
    env = {
        **os.environ,
        "HANDOFF_CONSUMER_CREDENTIAL": review.token,
        "TEST_CONSUMER_NAME": "review",
    }
    run = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "replay", "run", "r-all", "--app", APP],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def items() -> int:
            row = admin.execute("SELECT count(*) FROM handoff.replay_items WHERE plan = 'r-all'")
            return int(row.fetchone()[0])  # type: ignore[index]

        assert wait_until(lambda: items() >= 8, 60), "the replay did not get going"
        assert _cli(review, "stop", "r-all").returncode == 0
        assert run.wait(30) == 3  # stopped
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
    mid = items()
    assert 8 <= mid < 30
    state = admin.execute("SELECT status, stop_reason FROM handoff.replay_plans "
                          "WHERE name = 'r-all'").fetchone()  # fmt: skip
    assert state == ("stopped", "stop requested")
    # Within a second of the request (both times from the database's clock).
    took = admin.execute(
        """SELECT extract(epoch FROM
                  (SELECT at FROM handoff.replay_audit WHERE plan = 'r-all' AND action = 'stopped')
                - (SELECT at FROM handoff.replay_audit WHERE plan = 'r-all'
                    AND action = 'stop requested'))"""
    ).fetchone()[0]  # type: ignore[index]
    assert 0 <= took < 1.0, took
    resumed = _cli(review, "resume", "r-all", "--app", APP)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # Every record once: 10 suppressed by the guard, 19 applied, 1 excluded.
    outcomes = dict(admin.execute("SELECT outcome, count(*) FROM handoff.replay_items "
                                  "WHERE plan = 'r-all' GROUP BY 1").fetchall())  # fmt: skip
    assert outcomes == {"duplicate": 10, "completed": 19, "excluded": 1}
    rows = effects(admin, tenant)
    assert len(rows) == 29 and len({r[4] for r in rows}) == 29  # no effect twice
    status = _cli(review, "status", "r-all")
    assert "reconciled: every authorised record has one outcome" in status.stderr
    record = _cli(review, "record", "r-all")
    assert record.returncode == 0, record.stderr
    assert f"revision `{revision}`" in record.stdout
    assert "observed: completed 19, duplicate 10, quarantined 0, unresolved 0, excluded 1" in (
        record.stdout
    )
    assert "stop requested" in record.stdout and "_(to fill in)_" in record.stdout


def test_capabilities_not_listed_are_skipped_never_performed(
    service: ServiceFactory, migrated: HandoffSettings, wire: Wire, admin: psycopg.Connection[Any],
    tenant: str,
) -> None:  # fmt: skip
    maker, payer = service("maker", can_create=True), service("payer")
    app = Consumer("payer", credential=payer)
    pay = app.effect("pay", provider=lambda: SandboxPayments("http://127.0.0.1:9"))

    @app.handler("created")
    def charge(event: Event, tx: HandoffTx) -> None:
        pay.intend(tx, event, {"amount": 5, "currency": "EUR", "reference": event.document_id})
        tx.start_workflow(workflow="ship", execution_name=f"ship-{event.document_id}",
                          document_id=event.document_id, run_id=event.run_id,
                          event_id=event.event_id, input={})  # fmt: skip

    with HandoffClient.direct(maker, migrated.database_url, pool_size=1) as client:
        for doc in ("p-1", "p-2"):
            client.create(event_id=f"{doc}-c", document_id=doc, owner="payer", status="new")
    for (doc, _r, _v), payload in sorted(payloads(admin, tenant).items()):
        wire.produce(wire.encode(payload), key=doc, event_type="created", owner="payer",
                     tenant=tenant)  # fmt: skip
    with psycopg.connect(migrated.database_url, autocommit=True) as conn:
        from handoff.operate.manifest import Manifest, Positions

        with Positions(migrated.kafka_bootstrap, wire.topic) as positions:
            ranges = positions.between(None, None)
        manifest = Manifest(
            tenant=tenant, consumer="payer", topic=wire.topic, ranges=ranges,
            failure_class="handler_error", handler_revision=replay.handler_revision(app),
            expected_effect="charge again", allowed_capabilities=["workflow:ship"],
            reconciliation_owner="ops", rate=100,
        )  # fmt: skip
        replay.save(conn, "r-caps", manifest, "test")
        replay.approve(conn, "r-caps", manifest.revision, "test")
    result = replay.Replayer(migrated, app, "r-caps").run()
    assert result.status == "completed" and result.counts == {"completed": 2}
    skipped = admin.execute("SELECT event_id, capability FROM handoff.replay_skipped "
                            "WHERE plan = 'r-caps' ORDER BY 1").fetchall()  # fmt: skip
    assert skipped == [("p-1-c", "pay"), ("p-2-c", "pay")]
    intents = admin.execute("SELECT count(*) FROM handoff.effect_intents WHERE tenant_id = %s",
                            (tenant,)).fetchone()  # fmt: skip
    assert intents == (0,)  # never intended, so no executor can perform it
    runs = admin.execute("SELECT count(*) FROM handoff.workflow_runs WHERE tenant_id = %s",
                         (tenant,)).fetchone()  # fmt: skip
    assert runs == (2,)  # the listed capability was used


@pytest.fixture(autouse=True)
def _no_leftover_plans(admin: psycopg.Connection[Any]) -> Iterator[None]:
    yield
    admin.execute("DELETE FROM handoff.replay_plans WHERE name LIKE 'r-%%'")
