"""The effect ledger at work: stable keys, the business-operation rule, the lockdown,
leases and fencing, unresolved intents and their resolution, and no provider call
inside an open transaction."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import pq

from handoff.consumers.executor import Executor
from handoff.consumers.providers import Answer, SandboxPayments
from handoff.consumers.settings import EffectSettings
from handoff.core import HandoffClient, handoff_tx
from handoff.core import effects_sql as ledger
from handoff.core.errors import InvalidRequest, NotPermitted
from handoff.core.settings import HandoffSettings
from handoff.core.tx import transact
from handoff.rehearsal.orders import PAYMENTS
from handoff.rehearsal.rows import Rehearsal
from tests.fix_effects import SandboxProcess, env_for


def _intents(r: Rehearsal, doc: str) -> list[dict[str, Any]]:
    return r.evidence(doc)["intents"]


def _placed_and_applied(r: Rehearsal) -> tuple[str, dict[str, Any]]:
    doc, payload = r.order()
    assert r.processor().run_one(r.item(payload)) == "apply"
    return doc, payload


def test_the_idempotency_key_is_derived_from_tenant_consumer_event_and_effect(
    rehearsal: Rehearsal,
) -> None:
    doc, payload = _placed_and_applied(rehearsal)
    [intent] = _intents(rehearsal, doc)
    raw = "\x1f".join((rehearsal.tenant, PAYMENTS, payload["eventId"], "pay")).encode()
    assert intent["idempotency_key"] == f"payments.pay.{hashlib.sha256(raw).hexdigest()[:32]}"
    assert intent["business_key"] == f"{doc}:1"


def test_two_event_ids_for_one_business_operation_authorise_one_payment(
    rehearsal: Rehearsal, sandbox: SandboxProcess
) -> None:
    doc, _ = rehearsal.order()
    conn = rehearsal._service_conn(PAYMENTS)
    request = {"amount": 700, "currency": "EUR", "reference": doc, "metadata": {"version": 1}}
    found = []
    for event_id in ("first-event", "second-event"):
        with handoff_tx(conn) as tx:
            found.append(
                tx.intend(
                    event_id=event_id,
                    effect="pay",
                    document_id=doc,
                    run_id=1,
                    request=request,
                    business_key=f"{doc}:1",
                )
            )
            tx.commit()
    first, second = found
    assert first.created and not second.created
    assert second.id == first.id and second.event_id == "first-event"
    rehearsal.app.effects["pay"].outcome_fn = None  # no order transition in this test
    rehearsal.executor().drain()
    assert len(sandbox.payments(doc)) == 1


def test_the_same_event_cannot_change_its_effects_request(rehearsal: Rehearsal) -> None:
    conn = rehearsal._service_conn(PAYMENTS)
    args: dict[str, Any] = {"event_id": "e", "effect": "pay", "document_id": "d", "run_id": 1}
    with handoff_tx(conn) as tx:
        tx.intend(**args, request={"amount": 1, "currency": "EUR", "reference": "d"})
        again = tx.intend(**args, request={"amount": 1, "currency": "EUR", "reference": "d"})
        assert not again.created
        with pytest.raises(InvalidRequest, match="another request"):
            tx.intend(**args, request={"amount": 2, "currency": "EUR", "reference": "d"})


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM handoff.effect_intents",
        "SELECT * FROM handoff.effect_history",
        "SELECT * FROM handoff.workflow_runs",
        "UPDATE handoff.effect_intents SET state = 'succeeded'",
        "DELETE FROM handoff.effect_history",
        "INSERT INTO handoff.workflow_runs (tenant_id) VALUES ('x')",
    ],
)
def test_service_roles_have_no_rights_on_the_ledger_tables(
    rehearsal: Rehearsal, statement: str
) -> None:
    conn = rehearsal._service_conn(PAYMENTS)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)  # type: ignore[arg-type]
    conn.rollback()


def test_an_executor_claims_only_its_own_consumers_intents(rehearsal: Rehearsal) -> None:
    _placed_and_applied(rehearsal)
    other = rehearsal._service_conn("shipping")  # another service of the same tenant
    with handoff_tx(other) as tx:
        assert (
            tx.execute(
                ledger.CLAIM, {"worker": "x", "lease_s": 5, "limit": 100, "submit": True}
            ).fetchall()
            == []
        )
    assert rehearsal.executor().drain() == 1


def test_a_lease_taken_over_fences_the_late_executor(
    rehearsal: Rehearsal, sandbox: SandboxProcess
) -> None:
    doc, _ = _placed_and_applied(rehearsal)
    late = rehearsal._service_conn(PAYMENTS)
    [claimed] = transact(
        late,
        lambda tx: tx.execute(
            ledger.CLAIM, {"worker": "late", "lease_s": 0.2, "limit": 1, "submit": False}
        ).fetchall(),
    )
    intent_id, claim = claimed[0], claimed[7]
    time.sleep(0.3)  # the late executor stalls past its lease
    assert rehearsal.executor().drain() == 1
    stale_submit = transact(
        late, lambda tx: tx.execute(ledger.SUBMITTING, {"id": intent_id, "claim": claim}).fetchone()
    )
    record = {
        "id": intent_id, "claim": claim, "state": "failed", "reconciliation": None,
        "provider_ref": None, "outcome": None, "error": "late", "retry_in_s": 0,
        "lookup_failed": False, "detail": None,
    }  # fmt: skip
    stale_record = transact(late, lambda tx: tx.execute(ledger.RECORD, record).fetchone())
    assert stale_submit == (False,) and stale_record == (False,)
    ev = rehearsal.evidence(doc)
    assert ev["intents"][0]["state"] == "succeeded" and len(ev["provider_records"]) == 1
    assert any("lease of late expired" in (h["detail"] or "") for h in ev["intent_history"])


class FakeProviderCheckingNoOpenTransaction:
    """A fake provider built on the production interface: it delegates to the sandbox
    and records the executor connection's transaction status during each call."""

    def __init__(self, real: SandboxPayments, conn: psycopg.Connection[Any]) -> None:
        self.real, self.conn = real, conn
        self.seen: list[pq.TransactionStatus] = []

    def submit(self, key: str, request: dict[str, Any]) -> Answer:
        self.seen.append(self.conn.info.transaction_status)
        return self.real.submit(key, request)

    def status(self, key: str) -> Answer | None:
        self.seen.append(self.conn.info.transaction_status)
        return self.real.status(key)

    def close(self) -> None:
        self.real.close()


def test_with_a_fake_provider_no_call_happens_inside_an_open_transaction(
    rehearsal: Rehearsal, sandbox: SandboxProcess
) -> None:
    doc, payload = rehearsal.order()
    sandbox.arm(kind="drop", reference=doc)  # a submission, then a lookup
    rehearsal.processor().run_one(rehearsal.item(payload))
    executor = rehearsal.executor()
    fake = FakeProviderCheckingNoOpenTransaction(rehearsal.provider, executor.conn)
    effect = rehearsal.app.effects["pay"]
    effect._made = fake  # the declared provider, swapped for the checking one
    assert executor.drain() == 2
    assert fake.seen == [pq.TransactionStatus.IDLE, pq.TransactionStatus.IDLE]


def _cli(settings: HandoffSettings, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", *args],
        capture_output=True,
        env=env_for(settings),
        timeout=60,
        check=False,
    )


def test_an_unanswerable_lookup_hands_the_intent_to_its_owner_who_resolves_it(
    rehearsal: Rehearsal, sandbox: SandboxProcess, migrated: HandoffSettings
) -> None:
    doc, payload = rehearsal.order()
    sandbox.arm(kind="drop", reference=doc)
    sandbox.arm(kind="lookup_error", times=2)
    rehearsal.processor().run_one(rehearsal.item(payload))
    config = EffectSettings(retry_base_s=0, retry_max_s=0, max_lookups=2)
    executor = Executor(rehearsal.app, rehearsal._service_conn(PAYMENTS), config)
    assert executor.drain() == 3  # the submission, two failed lookups; then nothing is due
    [intent] = _intents(rehearsal, doc)
    assert (intent["state"], intent["reconciliation"]) == ("unknown", "unresolved")

    listed = _cli(migrated, "effects", "list", "--unresolved", "--tenant", rehearsal.tenant)
    assert listed.returncode == 0 and str(intent["id"]) in listed.stdout.decode()
    assert "payments" in listed.stdout.decode()  # the owner

    wrong = _cli(migrated, "effects", "resolve", "999999999", "--outcome", "retry",
                 "--reason", "x", "--yes")  # fmt: skip
    assert wrong.returncode == 1 and "EffectNotFound" in wrong.stderr.decode()
    resolved = _cli(
        migrated, "effects", "resolve", str(intent["id"]), "--outcome", "retry",
        "--reason", "provider status page is back", "--by", "ops-anna", "--yes",
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr.decode()
    again = _cli(migrated, "effects", "resolve", str(intent["id"]), "--outcome", "failed",
                 "--reason", "x", "--yes")  # fmt: skip
    # (whitespace folded: the console wraps the message, and ids drawn on a Citus
    # worker are 15 digits long)
    assert again.returncode == 1 and "not unresolved" in " ".join(again.stderr.decode().split())

    assert executor.drain() == 1  # a lookup first: it finds the charge
    ev = rehearsal.evidence(doc)
    [intent] = ev["intents"]
    assert (intent["state"], intent["reconciliation"]) == ("succeeded", "reconciled")
    assert len(ev["provider_records"]) == 1 and ev["order"][0]["status"] == "paid"
    assert any(
        h["actor"] == "ops-anna" and "provider status page is back" in h["detail"]
        for h in ev["intent_history"]
    )
    shown = _cli(migrated, "effects", "show", str(intent["id"]))
    assert "resolved by hand (retry)" in shown.stdout.decode()


def test_a_failing_on_outcome_keeps_the_answer_and_hands_the_intent_over(
    rehearsal: Rehearsal,
) -> None:
    doc, _ = _placed_and_applied(rehearsal)
    # The order moves on before the payment's answer: the outcome's handoff is refused.
    with HandoffClient.direct(rehearsal.creds[PAYMENTS], rehearsal.settings.database_url) as c:
        c.emit(event_id=str(uuid.uuid4()), event_type="held", document_id=doc,
               next_owner=PAYMENTS, status="on hold", expected_version=2)  # fmt: skip
    rehearsal.executor().drain()
    [intent] = _intents(rehearsal, doc)
    assert (intent["state"], intent["reconciliation"]) == ("succeeded", "unresolved")
    assert intent["provider_ref"] is not None
    row = rehearsal.admin.execute(
        "SELECT error FROM handoff.effect_intents WHERE id = %s", (intent["id"],)
    ).fetchone()
    assert row is not None and "on_outcome failed" in row[0]


def test_service_roles_cannot_list_or_resolve(rehearsal: Rehearsal) -> None:
    from handoff.core.effects import list_intents

    conn = rehearsal._service_conn(PAYMENTS)
    with pytest.raises(NotPermitted):
        list_intents(conn)


def test_the_open_intents_by_state_count_only_the_callers_own(rehearsal: Rehearsal) -> None:
    """effect_pending(), behind handoff_effects_open and handoff_effects_unresolved."""
    _placed_and_applied(rehearsal)
    _placed_and_applied(rehearsal)

    def pending(service: str) -> dict[str, int]:
        conn = rehearsal._service_conn(service)
        found = {state: int(n) for state, n, _ in conn.execute(ledger.PENDING)}
        conn.rollback()
        return {state: n for state, n in found.items() if n}

    assert pending(PAYMENTS) == {"intended": 2}
    assert pending("shipping") == {}  # another service of the tenant: none of its own
    rehearsal.admin.execute(
        "UPDATE handoff.effect_intents SET reconciliation = 'unresolved' "
        "WHERE id = (SELECT min(id) FROM handoff.effect_intents WHERE tenant_id = %s)",
        (rehearsal.tenant,),
    )
    assert pending(PAYMENTS) == {"intended": 1, "unresolved": 1}
    assert rehearsal.executor().drain() == 1  # the unresolved one waits for a person
    assert pending(PAYMENTS) == {"unresolved": 1}
