"""The invoice pipeline's services, as consumers: each reacts to the event that made
it the owner and hands the invoice on, through the emit contract.

- ``routing`` picks the reviewer by rules on the data: ``senior-review`` from
  10,000 EUR, ``review`` below.
- ``review`` / ``senior-review`` approve small amounts (below 1,000 EUR) at
  once; larger ones wait for a person, who approves or rejects in the tracker
  (or with the client, as the README shows).
- ``finalization`` pays an approved invoice through the effect ledger against
  the sandbox provider (HANDOFF_SANDBOX_URL): one payment per invoice and run,
  whatever is redelivered; the provider's answer completes the invoice
  (paid) or sends it back to its reviewer (payment failed).

Run one with ``handoff consume handoff.samples.invoices:routing`` and its
credential in HANDOFF_CONSUMER_CREDENTIAL; ``handoff demo`` runs them all.
"""

from __future__ import annotations

import os
import uuid

from handoff.consumers import Consumer, Event, Outcome
from handoff.consumers.providers import SandboxPayments
from handoff.core import HandoffTx
from handoff.core.models import Rejection

SENIOR_FROM = 10_000  # EUR: senior review
AUTO_APPROVE_BELOW = 1_000  # EUR: approved without a person
_NAMESPACE = uuid.UUID("0b3f9a7e-2c51-4d0e-8f4a-6a1d2b9c7e55")


def _amount(event: Event) -> float:
    return float(event.data.get("amount") or 0)


routing = Consumer("routing")


@routing.handler("created")
def route(event: Event, tx: HandoffTx) -> None:
    reviewer = "senior-review" if _amount(event) >= SENIOR_FROM else "review"
    # Nothing reads the receipt: the handoff rides with the unit's commit (wait=False),
    # so the unit can be sent ahead of the one before it (consumers/queued.py).
    tx.hand_on(event, "routed", to=reviewer, status="waiting for review", step="route",
               due_at=event.due_at, wait=False)  # fmt: skip


def _triage(event: Event, tx: HandoffTx) -> None:
    if _amount(event) >= AUTO_APPROVE_BELOW:
        return  # a person decides (the tracker's review page, or the client)
    tx.hand_on(event, "approved", to="finalization", status="waiting for payment",
               step="auto-approve", wait=False)  # fmt: skip


review = Consumer("review")
review.add_handler("routed", _triage, name="triage")
senior_review = Consumer("senior-review")
senior_review.add_handler("routed", _triage, name="triage")


finalization = Consumer("finalization")
pay = finalization.effect(
    "pay", provider=lambda: SandboxPayments(os.environ["HANDOFF_SANDBOX_URL"], timeout_s=5.0)
)


@finalization.handler("approved")
def finalize(event: Event, tx: HandoffTx) -> None:
    paying = tx.hand_on(event, "paying", to="finalization", status="paying", step="pay")
    if isinstance(paying, Rejection):
        return  # refused: the runtime fails the unit as an invalid transition
    pay.intend(
        tx,
        event,
        {
            "amount": round(_amount(event) * 100),  # cents
            "currency": str(event.data.get("currency") or "EUR"),
            "reference": event.document_id,
            "metadata": {
                "run": event.run_id,
                "version": paying.version,
                "reviewer": event.previous_owner or "",
            },
        },
        business_key=f"{event.document_id}:{event.run_id}",
    )


@pay.on_outcome
def settled(outcome: Outcome, tx: HandoffTx) -> None:
    version = int(outcome.request["metadata"]["version"])
    event_id = str(uuid.uuid5(_NAMESPACE, f"{outcome.idempotency_key}/settled"))
    if outcome.succeeded:
        tx.emit(
            event_id=event_id,
            event_type="paid",
            document_id=outcome.document_id,
            run_id=outcome.run_id,
            next_owner=None,
            status="paid",
            expected_version=version,
            data={"payment": outcome.reference},
            causation_id=outcome.event_id,
        )
    else:
        tx.emit(
            event_id=event_id,
            event_type="payment_failed",
            document_id=outcome.document_id,
            run_id=outcome.run_id,
            next_owner=str(outcome.request["metadata"].get("reviewer") or "review"),
            status="payment declined",
            expected_version=version,
            causation_id=outcome.event_id,
        )
