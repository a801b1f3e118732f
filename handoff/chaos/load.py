"""The load generator: invoices created through the API at a steady rate.

A create whose outcome is unknown (no answer, a 5xx, the API down) is sent
again, unchanged, with the same event id, until it is answered: the API
returns the original receipt if the first attempt was accepted. Every
receipt is kept; the verdict checks each one is in the database.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field

from handoff.core.client import HandoffClient
from handoff.core.errors import OutcomeUnknown, TransientConflict, Unavailable
from handoff.core.identity import Credential
from handoff.core.models import Receipt

log = logging.getLogger("handoff.chaos")


@dataclass
class LoadFigures:
    receipts: dict[str, Receipt] = field(default_factory=dict)
    poison: set[str] = field(default_factory=set)
    retries: int = 0
    replayed: int = 0  # retries answered with the stored receipt of an earlier attempt
    longest_refusal_s: float = 0.0  # the longest a create waited for an accepting API


class LoadGenerator:
    def __init__(
        self, api_url: str, intake: Credential, *, documents: int, rate: float, poison: int,
        seed: int, stop: threading.Event,
    ) -> None:  # fmt: skip
        self.client = HandoffClient.http(api_url, intake, timeout_s=5.0)
        self.documents, self.rate, self.stop = documents, rate, stop
        self.rng = random.Random(seed)
        # Poison spread over the run, never the first documents (the pipeline must flow).
        picks = range(max(1, documents // 10), documents)
        self.poison = set(self.rng.sample(picks, min(poison, len(picks))))
        self.figures = LoadFigures()
        self.created = 0

    def document_id(self, n: int) -> str:
        return f"invoice-{n:06d}"

    def run(self) -> None:
        began = time.monotonic()
        try:
            for n in range(self.documents):
                if self.stop.is_set():
                    return
                self._create(n)
                self.created = n + 1
                # A steady rate: after an outage, catch up without bursts beyond it.
                pause = began + (n + 1) / self.rate - time.monotonic()
                if pause > 0:
                    self.stop.wait(pause)
        finally:
            self.client.close()

    def _create(self, n: int) -> None:
        doc = self.document_id(n)
        poison = n in self.poison
        # amounts below 1,000 are approved at once; poison has an amount routing cannot read
        data = {"amount": "poison" if poison else round(self.rng.uniform(20, 990), 2),
                "currency": "EUR"}  # fmt: skip
        event_id = f"{doc}-created"
        refused_since: float | None = None
        while True:
            try:
                receipt = self.client.create(
                    event_id=event_id, document_id=doc, owner="routing", status="received",
                    data=data,
                )  # fmt: skip
                break
            except (Unavailable, OutcomeUnknown, TransientConflict) as exc:
                if refused_since is None:
                    refused_since = time.monotonic()
                    log.info("create %s: %s; retrying with the same event id", doc, exc)
                self.figures.retries += 1
                if self.stop.wait(0.25):
                    return
        if refused_since is not None:
            waited = time.monotonic() - refused_since
            self.figures.longest_refusal_s = max(self.figures.longest_refusal_s, waited)
        self.figures.replayed += receipt.replayed
        self.figures.receipts[doc] = receipt
        if poison:
            self.figures.poison.add(doc)
