"""Intake: creates invoices, as the first service of the sample pipeline.

``python -m handoff.samples.intake`` creates one every few seconds until
stopped (``handoff demo`` runs it under ``handoff run``); ``Intake.create``
is also what the demo seeds with. Some invoices are due soon, so they go
overdue while they wait for a person; for some the sandbox provider is told
to misbehave when they are paid (a lost answer, a 503, a decline, a status
lookup that fails), so retries, reconciliations, declines and unresolved
payments show up in the tracker as they would in production.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from handoff.core.client import HandoffClient
from handoff.core.errors import AlreadyExists, ConflictingEventReuse
from handoff.core.models import Receipt

log = logging.getLogger("handoff.samples.intake")

CUSTOMERS = ("Acme GmbH", "Globex", "Initech", "Umbrella", "Stark Industries", "Wayne Corp")
# (fault armed at the provider for the invoice's payment, share of invoices)
FAULTS = (
    ({"kind": "drop"}, 0.06),  # paid, answer lost: unknown, then reconciled
    ({"kind": "error", "times": 2}, 0.06),  # 503 twice: retried
    ({"kind": "decline"}, 0.04),  # declined: back to its reviewer
)
UNRESOLVABLE = 0.02  # paid, answer lost, and the status lookups fail: for a person


@dataclass
class Intake:
    client: HandoffClient
    numbers: Path  # where the next invoice number is kept (demo.json)
    sandbox_url: str | None
    rng: random.Random

    def _next_number(self) -> int:
        raw = json.loads(self.numbers.read_text())
        number = int(raw.get("next_number", 1001))
        raw["next_number"] = number + 1
        self.numbers.write_text(json.dumps(raw, indent=2))
        return number

    def create(self, *, due_soon: bool = False, document_id: str | None = None,
               amount: float | None = None) -> Receipt | None:  # fmt: skip
        """One invoice at routing; None if its id was taken (then the next one)."""
        doc = document_id or f"invoice-{self._next_number()}"
        now = datetime.now(UTC)
        due = now + (
            timedelta(seconds=self.rng.randint(30, 120))
            if due_soon
            else timedelta(minutes=self.rng.randint(20, 240))
        )
        if amount is None:
            amount = round(
                self.rng.choice((self.rng.uniform(80, 999), self.rng.uniform(1_000, 25_000))), 2
            )
        if document_id is None:  # a named invoice (the README's) is paid without faults
            self._arm_faults(doc)
        try:
            receipt = self.client.create(
                event_id=f"{doc}-created",
                document_id=doc,
                owner="routing",
                status="waiting for routing",
                due_at=due,
                data={"customer": self.rng.choice(CUSTOMERS), "amount": amount, "currency": "EUR"},
            )
        except (AlreadyExists, ConflictingEventReuse):
            return None
        return None if receipt.replayed else receipt

    def _arm_faults(self, reference: str) -> None:
        if not self.sandbox_url:
            return
        faults = [fault for fault, share in FAULTS if self.rng.random() < share]
        if self.rng.random() < UNRESOLVABLE:
            faults = [{"kind": "drop"}, {"kind": "lookup_error", "times": 5}]
        for fault in faults[:2]:
            body = {**fault, "reference": reference} if fault["kind"] != "lookup_error" else fault
            try:
                httpx.post(f"{self.sandbox_url}/_sandbox/faults", json=body, timeout=5)
            except httpx.HTTPError as exc:
                log.warning("could not arm a sandbox fault: %s", exc)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    every_s = float(os.environ.get("HANDOFF_INTAKE_EVERY_S", "3"))
    home = Path(os.environ.get("HANDOFF_HOME", ".handoff"))
    client = HandoffClient.direct(os.environ["HANDOFF_INTAKE_CREDENTIAL"], pool_size=1)
    intake = Intake(client, home / "demo.json", os.environ.get("HANDOFF_SANDBOX_URL"),
                    random.Random())  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("creating an invoice every %.1f s", every_s)
    with client:
        while not stop.wait(every_s * intake.rng.uniform(0.5, 1.5)):
            try:
                receipt = intake.create(due_soon=intake.rng.random() < 0.15)
            except Exception as exc:  # the database restarting: the next one will do
                log.warning("invoice not created: %s", exc)
                continue
            if receipt is not None:
                log.info("created %s", receipt.document_id)


if __name__ == "__main__":
    main()
