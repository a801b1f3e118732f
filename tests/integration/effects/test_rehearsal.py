"""The concurrent-delivery rehearsal: one test per row, each checking the captured
evidence itself (order, guard rows, intent, history, quarantine, provider records)."""

from __future__ import annotations

import subprocess
import sys

from handoff.core.settings import HandoffSettings
from handoff.rehearsal.rows import Rehearsal
from tests.fix_effects import SandboxProcess, env_for


def test_two_deliveries_race_only_the_winner_applies_and_one_identity_is_offered(
    rehearsal: Rehearsal,
) -> None:
    row = rehearsal.row_race()
    ev = row.evidence
    assert row.passed, row
    assert len(ev["guards"]) == 1 and ev["order"][0]["status"] == "paid"
    [intent] = ev["intents"]
    assert [h["to_state"] for h in ev["intent_history"]].count("intended") == 1
    [charge] = ev["provider_records"]
    assert charge["idempotencyKey"] == intent["idempotency_key"]
    assert intent["state"] == "succeeded" and intent["provider_ref"] == charge["id"]


def test_a_winner_failing_before_commit_leaves_guard_transition_and_intent_absent(
    rehearsal: Rehearsal,
) -> None:
    row = rehearsal.row_crash_before_commit()
    crashed, redelivered = row.evidence["after_crash"], row.evidence["after_redelivery"]
    assert row.passed, row
    assert crashed["guards"] == [] and crashed["intents"] == []
    assert (crashed["order"][0]["version"], crashed["order"][0]["status"]) == (1, "placed")
    assert crashed["provider_records"] == []
    # Nothing was lost either: the redelivery applied, and paid once.
    assert len(redelivered["intents"]) == 1 and len(redelivered["provider_records"]) == 1


def test_a_lost_acknowledgement_is_recognised_and_the_intent_keeps_its_identity(
    rehearsal: Rehearsal,
) -> None:
    row = rehearsal.row_ack_lost()
    ev = row.evidence
    assert row.passed, row
    assert len(ev["guards"]) == 1
    # v1 placed, v2 charging (the transition, once), v3 paid (the outcome).
    assert ev["order"][0]["version"] == 3
    [charge] = ev["provider_records"]
    assert charge["idempotencyKey"] == ev["intents"][0]["idempotency_key"]


def test_a_lost_provider_answer_is_unknown_then_reconciled_with_one_charge(
    rehearsal: Rehearsal,
) -> None:
    row = rehearsal.row_response_lost()
    lost = row.evidence["after_lost_answer"]["intents"][0]
    done = row.evidence["after_reconciliation"]
    assert row.passed, row
    assert (lost["state"], lost["reconciliation"]) == ("unknown", "pending")
    assert lost["state"] != "failed"
    [charge] = done["provider_records"]
    [intent] = done["intents"]
    assert (intent["state"], intent["reconciliation"]) == ("succeeded", "reconciled")
    assert intent["provider_ref"] == charge["id"] and intent["attempts"] == 1
    steps = [h["to_state"] for h in done["intent_history"]]
    # Claimed and submitted in one step; after the lost answer, claimed for the lookup.
    assert steps == ["intended", "submitted", "unknown", "claimed", "succeeded"]


def test_conflicting_reuse_of_an_event_id_is_quarantined_and_authorises_nothing(
    rehearsal: Rehearsal,
) -> None:
    row = rehearsal.row_conflicting_content()
    ev = row.evidence
    assert row.passed, row
    [entry] = ev["quarantine"]
    assert entry["category"] == "conflicting_reuse"
    assert [r["amount"] for r in ev["provider_records"]] == [4200]
    assert [i["request"]["amount"] for i in ev["intents"]] == [4200]


def test_a_lock_timeout_during_the_race_is_retried_not_read_as_done(
    rehearsal: Rehearsal,
) -> None:
    row = rehearsal.row_lock_timeout()
    assert row.passed, row
    assert len(row.evidence["intents"]) == 1 and len(row.evidence["provider_records"]) == 1


def test_handoff_rehearse_prints_the_table_and_exits_zero(
    migrated: HandoffSettings, sandbox: SandboxProcess
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "rehearse", "--provider-url", sandbox.url],
        capture_output=True,
        env=env_for(migrated),
        timeout=300,
        check=False,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-3000:]
    assert "all 6 rows hold" in err
    for injected in (
        "race for the guard",
        "fails before its commit",
        "acknowledgement is",
        "loses the",
    ):
        assert injected in out


def test_handoff_rehearse_without_a_provider_says_how_to_start_one(
    migrated: HandoffSettings,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "rehearse", "--provider-url", "http://127.0.0.1:9"],
        capture_output=True,
        env=env_for(migrated),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "handoff sandbox-provider" in done.stderr.decode()
