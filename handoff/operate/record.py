"""The event recovery record (docs/recovery-record.md), filled in from a replay plan.

What Handoff knows it writes: the manifest and its approval, the run, the
outcomes and what was skipped, the retention that protects the guard. What
only people know (the invariant in business words, the recovery objective,
the final decision) stays as a blank line to fill, never a guess.
"""

from __future__ import annotations

from handoff.operate.replay import Status, when
from handoff.operate.retention import Retention, say

BLANK = "_(to fill in)_"
CHECKLIST = (
    "The business invariant and pending, failed, and compensated outcomes are defined.",
    "State and publication intent share a local transaction where agreement is required.",
    "Concurrent duplicates cannot repeat the local effect, and acknowledgment follows "
    "durable completion.",
    "External-effect ambiguity has a stable operation record and a tested reconciliation path.",
    "Retention, ordering, concurrency, and alert thresholds come from the actual workload.",
    "Schema tests include retained events and mixed producer and consumer versions.",
    "Quarantined work remains owned, visible, and controlled during replay.",
    "Recovery tests cover both crash boundaries and business outcomes, not only broker delivery.",
)


def render(found: Status, retention: Retention) -> str:
    plan, m = found.plan, found.plan.manifest
    row = plan.row
    kinds = ("completed", "duplicate", "quarantined", "unresolved", "excluded")
    outcomes = ", ".join(f"{k} {found.outcomes.get(k, 0)}" for k in kinds)
    skipped = ", ".join(f"{cap} x{n}" for cap, n in found.skipped.items()) or "none"
    ranges = ", ".join(f"{r.partition}:{r.start}-{r.end}" for r in m.ranges)
    scope = f"event ids {len(m.event_ids)}" if m.event_ids is not None else "every record"
    stop = ", ".join(
        s for s in (f"{m.stop_when_quarantined} quarantined" if m.stop_when_quarantined else "",
                    f"{m.stop_when_unresolved} unresolved" if m.stop_when_unresolved else "") if s
    ) or "none (stop by hand: handoff replay stop)"  # fmt: skip
    gaps = "none found by Handoff"
    if found.missing_ids:
        shown = ", ".join(found.missing_ids[:20])
        gaps = f"{len(found.missing_ids)} authorised event id(s) not found: {shown}"
    fields = [
        ("Workflow, invariant, and accountable owner",
         f"consumer `{m.consumer}` of tenant `{m.tenant}`; invariant: {BLANK}; "
         f"reconciliation owner: {m.reconciliation_owner}"),
        ("Producer, consumer effect, schema, and broker configuration",
         f"producer: the Handoff relay (outbox), topic `{m.topic}`, Avro envelope "
         f"`handoff.Event` from the registry; consumer effect: {m.expected_effect}"),
        ("Event identity and duplicate-guard retention",
         f"event id (the guard's key, per consumer); guards kept {say(retention.guards)}, "
         f"receipts {say(retention.receipts)}, replay window {say(retention.replay_window)}"),
        ("Local transaction boundary and external provider contract",
         "guard row, handler writes, next handoff and this record's outcome in one "
         "PostgreSQL transaction; external effects through the effect ledger only "
         f"(allowed here: {', '.join(m.allowed_capabilities) or 'none'}); provider: {BLANK}"),
        ("Ordering scope, maximum pending age, and recovery objective",
         f"per document run, version order; maximum pending age: {BLANK}; objective: {BLANK}"),
        ("Failure class, retry budget, quarantine owner",
         f"{m.failure_class}; retry budget: the consumer's HANDOFF_CONSUMER_RETRY_* settings; "
         f"quarantine owner: service `{m.consumer}`"),
        ("Replay manifest, permissions, and approved effects",
         f"plan `{plan.name}` revision `{m.revision}`, approved by {row['approved_by'] or '-'} "
         f"at {when(row['approved_at'])}; {scope} in {ranges}; excluded "
         f"{len(m.excluded)}; guard policy: {m.duplicate_guard}; approved effects: "
         f"{', '.join(m.allowed_capabilities) or 'none'}"),
        ("Handler revision, rate limit, stop signal, and operator",
         f"{m.handler_revision}; {m.rate:g} records/s; stop condition: {stop}; "
         f"status {plan.status}{' (' + row['stop_reason'] + ')' if row['stop_reason'] else ''}; "
         f"runner {row['runner'] or '-'}"),
        ("Expected and observed business outcomes",
         f"expected: {m.expected_effect}; observed: {outcomes}; skipped capabilities: {skipped}"),
        ("Uncertain or compensated operations and reconciliation owner",
         f"unresolved {found.outcomes.get('unresolved', 0)} (handoff effects list --unresolved "
         f"--consumer {m.consumer}); compensated: {BLANK}; owner: {m.reconciliation_owner}"),
        ("Evidence links, unresolved gaps, and final decision",
         f"handoff replay status {plan.name}; handoff audit --tenant {m.tenant}; gaps: {gaps}; "
         f"{'reconciled' if found.reconciled else 'not reconciled'}; final decision: {BLANK}"),
    ]  # fmt: skip
    lines = [f"# Event recovery record: replay `{plan.name}`", "",
             f"Generated from plan revision `{m.revision}` ({plan.status}).", "",
             "| | |", "|---|---|"]  # fmt: skip
    lines += [f"| {name} | {value.replace('|', '/')} |" for name, value in fields]
    lines += ["", "## Audit trail", ""]
    lines += [f"- {when(a['at'])} {a['actor']}: {a['action']}"
              + (f" (revision {a['revision']})" if a["revision"] else "")
              + (f": {a['detail']}" if a["detail"] else "") for a in found.audit]  # fmt: skip
    lines += ["", "## Completion checklist", ""]
    lines += [f"- [ ] {item}" for item in CHECKLIST]
    return "\n".join(lines) + "\n"
