"""The calls the executors of one process share (consumers/claims.py, records.py):
answers recorded together in one statement, each by its own claim, and the intents
a stopping process had claimed ahead handed back unsent, then performed once."""

from __future__ import annotations

import threading
import time
from typing import Any

from handoff.consumers.executor import Executors
from handoff.consumers.providers import Answer, SandboxPayments
from handoff.consumers.settings import EffectSettings
from handoff.core.settings import HandoffSettings
from handoff.rehearsal.orders import PAYMENTS
from handoff.rehearsal.rows import Rehearsal
from handoff.stack.procs import wait_until
from tests.fix_effects import SandboxProcess


def _intended(r: Rehearsal, n: int) -> list[str]:
    docs = []
    for _ in range(n):
        doc, payload = r.order()
        assert r.processor().run_one(r.item(payload)) == "apply"
        docs.append(doc)
    return docs


def _record(c: Any, claim: int) -> dict[str, Any]:
    return {
        "id": c.id, "claim": claim, "state": "succeeded", "reconciliation": None,
        "provider_ref": f"ref-{c.id}", "outcome": None, "error": None, "retry_in_s": 0.0,
        "lookup_failed": False, "detail": None,
    }  # fmt: skip


def _intent(r: Rehearsal, intent_id: int) -> dict[str, Any]:
    row = r.admin.execute(
        "SELECT state, provider_ref, lease_until, attempts, submitted_at, reconciliation "
        "FROM handoff.effect_intents WHERE id = %s",
        (intent_id,),
    ).fetchone()
    assert row is not None
    names = ("state", "provider_ref", "lease_until", "attempts", "submitted_at", "reconciliation")
    return dict(zip(names, row, strict=True))


def test_answers_recorded_together_are_each_checked_against_their_own_claim(
    rehearsal: Rehearsal,
) -> None:
    _intended(rehearsal, 3)
    executor = rehearsal.executor()
    first, second, third = sorted(executor.claim(3), key=lambda c: c.id)
    # Not in the intents' order, and the second with a claim it no longer holds.
    batch = [_record(third, third.claim), _record(second, second.claim - 1),
             _record(first, first.claim)]  # fmt: skip
    assert executor.record_many(batch) == [True, False, True]
    assert _intent(rehearsal, first.id)["provider_ref"] == f"ref-{first.id}"
    assert _intent(rehearsal, third.id)["state"] == "succeeded"
    fenced = _intent(rehearsal, second.id)
    assert fenced["state"] == "submitted" and fenced["provider_ref"] is None


class FakeProviderHeldOpen:
    """A fake provider built on the production interface: each submission waits until
    the test lets it go, then goes to the sandbox."""

    def __init__(self, real: SandboxPayments) -> None:
        self.real = real
        self.go = threading.Event()
        self.waiting = 0
        self._lock = threading.Lock()

    def submit(self, key: str, request: dict[str, Any]) -> Answer:
        with self._lock:
            self.waiting += 1
        self.go.wait(30)
        return self.real.submit(key, request)

    def status(self, key: str) -> Answer | None:
        return self.real.status(key)

    def close(self) -> None:
        pass


def test_a_stopping_process_hands_back_what_it_claimed_ahead_and_each_is_paid_once(
    rehearsal: Rehearsal, sandbox: SandboxProcess, migrated: HandoffSettings
) -> None:
    docs = _intended(rehearsal, 6)
    effect = rehearsal.app.effects["pay"]
    held = FakeProviderHeldOpen(rehearsal.provider)
    effect._made = held  # the declared provider, swapped for the one the test holds
    config = EffectSettings(executors=2, claim_ahead=6, lease_s=30, poll_s=0.2,
                            retry_base_s=0.0)  # fmt: skip
    executors = Executors(rehearsal.app, migrated.database_url, config)
    executors.start()
    try:
        # Two executors in their provider calls; the first claim took every intent
        # (one for each executor waiting and six ahead, of which four are left).
        assert wait_until(lambda: held.waiting == 2, 20), "two executors on the provider"
        states = [s for s, _ in _states(rehearsal, docs)]
        assert states.count("submitted") == 6, states
        stopping = threading.Thread(target=executors.stop, kwargs={"timeout_s": 20})
        stopping.start()
        time.sleep(0.3)  # the stop is seen before the two answers come back
        held.go.set()
        stopping.join(30)
        assert not stopping.is_alive()
    finally:
        held.go.set()
        executors.stop()
    after = _states(rehearsal, docs)
    assert sorted(s for s, _ in after) == ["intended"] * 4 + ["succeeded"] * 2
    handed_back = [d for s, d in after if s == "intended"]
    for doc in handed_back:
        ev = rehearsal.evidence(doc)
        assert ev["intent_history"][-1]["detail"] == "handed back unsent: the executors stopped"
        # As before the claim: no attempt spent, not marked submitted (so no lookup next).
        intent = _intent(rehearsal, ev["intents"][0]["id"])
        assert intent["attempts"] == 0 and intent["submitted_at"] is None
        assert intent["lease_until"] is None
    effect._made = rehearsal.provider
    assert rehearsal.executor().drain() == 4
    for doc in handed_back:
        ev = rehearsal.evidence(doc)
        assert ev["intents"][0]["state"] == "succeeded"
        # Sent once, with no lookup first (a lookup settles it as "reconciled").
        done = _intent(rehearsal, ev["intents"][0]["id"])
        assert done["attempts"] == 1 and done["reconciliation"] == "none"
        assert len(sandbox.payments(doc)) == 1


def _states(r: Rehearsal, docs: list[str]) -> list[tuple[str, str]]:
    rows = r.admin.execute(
        "SELECT state, document_id FROM handoff.effect_intents "
        "WHERE tenant_id = %s AND consumer = %s AND document_id = ANY(%s) ORDER BY id",
        (r.tenant, PAYMENTS, docs),
    ).fetchall()
    return [(row[0], row[1]) for row in rows]
