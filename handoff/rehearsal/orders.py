"""The rehearsal's order-payment workflow: a consumer that charges for an order.

``payments`` owns an order placed by ``shop``. On the ``created`` event
(status ``placed``) it moves the order to ``charging`` and records a
payment intent for (order, run) in the same transaction; its executor pays
through the provider, and the answer moves the order on: ``paid`` to
``shipping``, or ``payment_failed`` back to ``shop``.

Two knobs inject the rehearsal's failures inside the transaction: a pause
that holds the guard row uncommitted (so a second delivery meets it), and
orders whose next unit fails once, after its writes and before its commit.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from handoff.consumers.app import Consumer, Outcome
from handoff.consumers.event import Event
from handoff.consumers.providers import Provider
from handoff.core.identity import Credential
from handoff.core.models import Rejection
from handoff.core.tx import HandoffTx

SHOP, PAYMENTS, SHIPPING = "shop", "payments", "shipping"
_NAMESPACE = uuid.UUID("6c1f3a3e-5d0b-4f4e-9d0e-3d7c3f0e2a11")


class SimulatedCrash(Exception):
    """The unit of work dies after its writes and before its commit."""


@dataclass
class Knobs:
    pause_s: float = 0.0
    crash_once: set[str] = field(default_factory=set)


def payments_app(
    credential: Credential | None,
    provider: Provider | Callable[[], Provider],
    knobs: Knobs | None = None,
) -> Consumer:
    """``credential`` None: read from HANDOFF_CONSUMER_CREDENTIAL when the app starts."""
    knobs = knobs or Knobs()
    app = Consumer(PAYMENTS, credential)
    pay = app.effect("pay", provider=provider)

    @app.handler("created", where={"status": "placed"})
    def charge(event: Event, tx: HandoffTx) -> None:
        moved = tx.hand_on(event, "charging", to=PAYMENTS, status="charging", step="charge")
        if isinstance(moved, Rejection):
            return  # the runtime raises the refusal: an invalid transition
        pay.intend(
            tx,
            event,
            {
                "amount": int(event.data["amount"]),
                "currency": str(event.data.get("currency", "EUR")),
                "reference": event.document_id,
                "metadata": {"run": event.run_id, "version": moved.version},
            },
            business_key=f"{event.document_id}:{event.run_id}",
        )
        if knobs.pause_s:
            time.sleep(knobs.pause_s)  # the guard row stays uncommitted meanwhile
        if event.document_id in knobs.crash_once:
            knobs.crash_once.discard(event.document_id)
            raise SimulatedCrash(f"{event.document_id}: the unit dies before its commit")

    @pay.on_outcome
    def settled(outcome: Outcome, tx: HandoffTx) -> None:
        tx.emit(
            event_id=str(uuid.uuid5(_NAMESPACE, f"{outcome.idempotency_key}/settled")),
            event_type="paid" if outcome.succeeded else "payment_failed",
            document_id=outcome.document_id,
            run_id=outcome.run_id,
            next_owner=SHIPPING if outcome.succeeded else SHOP,
            status="paid" if outcome.succeeded else "payment_failed",
            expected_version=int(outcome.request["metadata"]["version"]),
            data={"payment": outcome.reference} if outcome.reference else None,
            causation_id=outcome.event_id,
        )  # a refusal fails the recording transaction (the executor checks)

    return app
