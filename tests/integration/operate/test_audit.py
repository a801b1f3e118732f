"""``handoff audit`` on the real stack: a healthy tenant passes; each planted breach is
found with its rows and a non-zero exit; the provider check finds a second charge at the
sandbox provider; the periodic mode exports the breaches as metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from handoff.consumers.providers import SandboxPayments
from handoff.core import HandoffClient
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port
from handoff.stack.procs import wait_until
from tests.fix_contract import ServiceFactory
from tests.fix_effects import SandboxProcess


def _audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", "audit", *args],
        capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy(),
    )  # fmt: skip


def _report(tenant: str, *more: str) -> tuple[int, dict[str, Any]]:
    done = _audit("--tenant", tenant, "--json", *more)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _breaches(report: dict[str, Any]) -> dict[str, int]:
    return {c["check"]: c["breaches"] for c in report["checks"]}


@pytest.fixture
def story(service: ServiceFactory, migrated: HandoffSettings, tenant: str) -> str:
    """Three invoices: one finished, one at billing with a deadline, one at review."""
    review, billing = service("review", can_create=True), service("billing")
    due = datetime.now(UTC) + timedelta(hours=3)
    with (
        HandoffClient.direct(review, migrated.database_url, pool_size=1) as r,
        HandoffClient.direct(billing, migrated.database_url, pool_size=1) as b,
    ):
        for doc in ("inv-1", "inv-2", "inv-3"):
            r.create(event_id=f"{doc}-c", document_id=doc, owner="review", status="new")
        for doc in ("inv-1", "inv-2"):
            r.emit(event_id=f"{doc}-r", event_type="reviewed", document_id=doc,
                   next_owner="billing", status="to bill", expected_version=1,
                   due_at=due)  # fmt: skip
        b.emit(event_id="inv-1-b", event_type="billed", document_id="inv-1", next_owner=None,
               status="paid", expected_version=2)  # fmt: skip
    return tenant


def test_a_healthy_tenant_passes(story: str) -> None:
    done = _audit("--tenant", story)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every invariant holds" in done.stderr  # the summary; the table is on stdout
    code, report = _report(story)
    assert code == 0 and report["ok"] and set(_breaches(report).values()) == {0}


def test_each_planted_breach_is_found_with_its_rows(
    story: str, admin: psycopg.Connection[Any]
) -> None:
    t = story
    # By key, not ctid: a statement on Citus names its tenant and its row by key.
    admin.execute("UPDATE handoff.owner_counts SET assigned = assigned + 1 "
                  "WHERE tenant_id = %s AND owner = 'review' AND shard = "
                  "(SELECT min(shard) FROM handoff.owner_counts "
                  " WHERE tenant_id = %s AND owner = 'review')", (t, t))  # fmt: skip
    admin.execute("UPDATE handoff.owner_due_counts SET n = n + 1 "
                  "WHERE tenant_id = %s AND (owner, due_hour, shard) = "
                  "(SELECT owner, due_hour, shard FROM handoff.owner_due_counts "
                  " WHERE tenant_id = %s AND n > 0 LIMIT 1)", (t, t))  # fmt: skip
    admin.execute("DELETE FROM handoff.document_history WHERE tenant_id = %s "
                  "AND document_id = 'inv-1' AND version = 2", (t,))  # fmt: skip
    admin.execute("DELETE FROM handoff.outbox WHERE tenant_id = %s "
                  "AND document_id = 'inv-3'", (t,))  # fmt: skip
    admin.execute(
        """INSERT INTO handoff.quarantine (tenant_id, consumer, event_id, topic, kafka_partition,
               kafka_offset, category, error, attempts)
           VALUES (%s, 'ghost', 'e-1', 't', 0, 1, 'handler_error', 'boom', 1)""",
        (t,),
    )
    code, report = _report(t)
    assert code == 1 and not report["ok"]
    rows = {c["check"]: c["rows"] for c in report["checks"]}
    # inv-1 lost its version 2: its history is 1, 3 and it also left the outbox's view
    assert _breaches(report) == {"counts": 1, "due-counts": 1, "versions": 1, "outbox": 1,
                                 "owners": 1}  # fmt: skip
    assert rows["counts"][0]["owner"] == "review"
    assert rows["counts"][0]["counted"] == rows["counts"][0]["actual"] + 1
    assert (rows["versions"][0]["document_id"], rows["versions"][0]["versions"]) == ("inv-1", 2)
    assert rows["outbox"][0]["document_id"] == "inv-3"
    assert (rows["owners"][0]["kind"], rows["owners"][0]["owner"]) == ("quarantine", "ghost")
    table = _audit("--tenant", t)
    assert table.returncode == 1 and "inv-3" in table.stdout and "5 breach(es)" in table.stderr


def test_the_provider_check_finds_a_second_charge(
    story: str, admin: psycopg.Connection[Any], sandbox: SandboxProcess
) -> None:
    reference = f"inv-2-{uuid.uuid4().hex[:6]}"
    request = {"amount": 1200, "currency": "EUR", "reference": reference}
    provider = SandboxPayments(sandbox.url)
    try:
        key = _handoff_key()
        paid = provider.submit(key, request)
        _intent(admin, story, key, request, "succeeded", paid.reference)
        code, report = _report(story, "--provider", f"pay={sandbox.url}")
        assert code == 0, report
        assert _breaches(report)["effects:pay"] == 0
        provider.submit(f"key-{uuid.uuid4()}", request)  # charged again, under another key
    finally:
        provider.close()
    code, report = _report(story, "--provider", f"pay={sandbox.url}")
    assert code == 1
    (row,) = next(c["rows"] for c in report["checks"] if c["check"] == "effects:pay")
    assert (
        row["reference"] == reference
        and "1 succeeded in Handoff, 2 at the provider" in (row["problem"])
    )


def test_the_provider_check_does_not_count_another_tenants_charge_of_the_same_reference(
    story: str, admin: psycopg.Connection[Any], sandbox: SandboxProcess
) -> None:
    """Two tenants share the provider and both have an inv-2: each paid once under its
    own intent's key. A tenant's audit counts its own charge only (a chaos run saw the
    other tenant's charge counted as a double)."""
    other = f"t-{uuid.uuid4().hex[:10]}"
    reference = f"inv-2-{uuid.uuid4().hex[:6]}"
    request = {"amount": 700, "currency": "EUR", "reference": reference}
    provider = SandboxPayments(sandbox.url)
    try:
        for tenant in (story, other):
            key = _handoff_key()
            paid = provider.submit(key, request)
            _intent(admin, tenant, key, request, "succeeded", paid.reference)
        provider.submit(f"key-{uuid.uuid4()}", request)  # and a true double, no intent
    finally:
        provider.close()
    code, report = _report(story, "--provider", f"pay={sandbox.url}")
    (row,) = next(c["rows"] for c in report["checks"] if c["check"] == "effects:pay")
    assert code == 1 and "1 succeeded in Handoff, 2 at the provider" in row["problem"], row
    assert len(row["at_provider"]) == 2  # its own and the keyless one, not the other tenant's


def _handoff_key() -> str:
    """An idempotency key of the shape Handoff gives a consumer's effect."""
    return f"billing.pay.{uuid.uuid4().hex}"


def _intent(
    admin: psycopg.Connection[Any],
    tenant: str,
    key: str,
    request: dict[str, Any],
    state: str,
    provider_ref: str | None,
) -> None:
    admin.execute(
        """INSERT INTO handoff.effect_intents (tenant_id, consumer, event_id, effect,
               idempotency_key, document_id, run_id, request, fingerprint, state,
               provider_ref, owner)
           VALUES (%s, 'billing', %s, 'pay', %s, 'inv-2', 1, %s, '\\x00', %s, %s, 'billing')""",
        (tenant, f"e-{uuid.uuid4()}", key, json.dumps(request), state, provider_ref),
    )


def test_the_provider_check_finds_charges_without_a_succeeded_effect(
    story: str, admin: psycopg.Connection[Any], sandbox: SandboxProcess
) -> None:
    """The other direction: a charge under a Handoff key with no intent at all (an
    orphan), and one whose intent Handoff recorded as failed; a charge still on its way
    (intent claimed) and one under another system's key are no breach."""
    provider = SandboxPayments(sandbox.url)
    request = {"amount": 900, "currency": "EUR", "reference": f"inv-9-{uuid.uuid4().hex[:6]}"}
    orphan, failed, in_flight = _handoff_key(), _handoff_key(), _handoff_key()
    try:
        code, report = _report(story, "--provider", f"pay={sandbox.url}")
        assert code == 0 and _breaches(report)["charges:pay"] == 0, report
        for key in (orphan, failed, in_flight, f"other-system-{uuid.uuid4()}"):
            provider.submit(key, request)
    finally:
        provider.close()
    _intent(admin, story, failed, request, "failed", None)
    _intent(admin, story, in_flight, request, "claimed", None)
    code, report = _report(story, "--provider", f"pay={sandbox.url}")
    assert code == 1
    rows = {row["key"]: row for row in
            next(c["rows"] for c in report["checks"] if c["check"] == "charges:pay")}  # fmt: skip
    assert set(rows) == {orphan, failed}, rows
    assert "no intent with this key" in rows[orphan]["problem"]
    assert "recorded the effect as failed" in rows[failed]["problem"]


def test_a_bad_provider_option_says_what_to_write(story: str) -> None:
    done = _audit("--tenant", story, "--provider", "pay")
    assert done.returncode == 2 and "EFFECT=URL" in done.stdout + done.stderr


def test_periodic_audits_export_breaches_as_metrics(
    story: str, admin: psycopg.Connection[Any]
) -> None:
    admin.execute("DELETE FROM handoff.outbox WHERE tenant_id = %s AND document_id = 'inv-3'",
                  (story,))  # fmt: skip
    port = pick_port(19410, set())
    proc = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "audit", "--tenant", story, "--every", "1",
         "--metrics-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def exported() -> str:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.HTTPError:
                return ""
            return text if 'handoff_audit_breaches{check="outbox"}' in text else ""

        assert wait_until(lambda: bool(exported()), 30)
        text = exported()
        assert 'handoff_audit_breaches{check="outbox"} 1.0' in text
        assert 'handoff_audit_breaches{check="counts"} 0.0' in text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
