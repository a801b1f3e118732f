"""A deterministic invoice seed for the tracker's browser tests.

Documents are moved through the emit contract by each service's own
``HandoffClient`` (direct mode), in a fixed pattern, so a test can say how
many wait where, which one is overdue and which one finished. The demo runs
the real event-driven pipeline instead (handoff/cli/_demo_setup.py); this is the
fixture the UI tests count on.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from handoff.cli._demo_setup import DemoCredentials
from handoff.core.client import HandoffClient
from handoff.core.errors import AlreadyExists, ConflictingEventReuse, ContractError
from handoff.core.settings import HandoffSettings

SERVICES = ("routing", "review", "finalization", "viewer")
# Stages in order: (owner, status while it waits there, event that moves it on).
STAGES = (
    ("routing", "waiting for routing", "routed"),
    ("review", "waiting for review", "reviewed"),
    ("finalization", "waiting for approval", "finalized"),
)
# The README's example document; it waits at review, version 7.
WALKTHROUGH = "invoice-42"
CUSTOMERS = ("Acme GmbH", "Globex", "Initech", "Umbrella", "Stark Industries", "Wayne Corp")


@dataclass
class Doc:
    document_id: str
    stage: int  # index into STAGES; len(STAGES) once finished
    version: int = 1


@dataclass
class Pipeline:
    """The three services' clients, and what the driver knows of each document."""

    clients: dict[str, HandoffClient]
    demo: DemoCredentials
    home: Path
    docs: list[Doc] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(42))
    rejected: int = 0

    @classmethod
    def open(cls, demo: DemoCredentials, settings: HandoffSettings, home: Path) -> Pipeline:
        clients = {
            name: HandoffClient.direct(demo.credentials[name], settings.database_url, pool_size=1)
            for name, _, _ in STAGES
        }
        return cls(clients, demo, home)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    def create(self, *, overdue: bool = False) -> Doc:
        while True:
            doc = Doc(f"invoice-{self.demo.next_number}", 0)
            self.demo.next_number += 1
            try:
                self.clients["routing"].create(
                    event_id=f"{doc.document_id}-created",
                    document_id=doc.document_id,
                    owner="routing",
                    status=STAGES[0][1],
                    due_at=self._deadline(overdue),
                    data={
                        "customer": self.rng.choice(CUSTOMERS),
                        "amount": round(self.rng.uniform(80, 25_000), 2),
                        "currency": "EUR",
                    },
                )
            except (AlreadyExists, ConflictingEventReuse):
                continue  # taken by a demo that stopped before saving its next number
            self.docs.append(doc)
            return doc

    def walkthrough(self) -> bool:
        """``invoice-42`` with review at version 7: the README's example then works as
        written with the demo's review credential. False if an earlier demo made it."""
        try:
            receipt = self.clients["routing"].create(
                event_id="invoice-42-created",
                document_id=WALKTHROUGH,
                owner="routing",
                status=STAGES[0][1],
                data={"customer": "Acme GmbH", "amount": 4200.0, "currency": "EUR"},
            )
        except (AlreadyExists, ConflictingEventReuse):
            return False
        if receipt.replayed:  # an earlier demo created it (and moved it on)
            return False
        doc = Doc(WALKTHROUGH, 0)
        self.advance(doc)
        for note in ("amounts", "tax ids", "bank details", "purchase order", "signatures"):
            self.progress(doc, f"checked the {note}")
        return True

    def advance(self, doc: Doc, *, overdue: bool = False) -> None:
        owner, _, event = STAGES[doc.stage]
        finished = doc.stage + 1 == len(STAGES)
        nxt = None if finished else STAGES[doc.stage + 1]
        self.clients[owner].emit(
            event_id=f"{doc.document_id}-{event}-{doc.version}",
            event_type=event,
            document_id=doc.document_id,
            next_owner=nxt[0] if nxt else None,
            status=nxt[1] if nxt else "paid",
            expected_version=doc.version,
            due_at=None if finished else self._deadline(overdue),
        )
        doc.stage += 1
        doc.version += 1

    def progress(self, doc: Doc, note: str) -> None:
        """Same owner, new status: an owner saying how far it got."""
        owner, status, _ = STAGES[doc.stage]
        self.clients[owner].emit(
            event_id=f"{doc.document_id}-progress-{doc.version}",
            event_type="progress",
            document_id=doc.document_id,
            next_owner=owner,
            status=f"{status} ({note})",
            expected_version=doc.version,
        )
        doc.version += 1

    def stale_attempt(self, doc: Doc) -> None:
        """An attempt a confused service would send, which the contract rejects: the
        previous owner acting again, or the owner with a version from the future."""
        if doc.stage > 0:
            owner, status, event = STAGES[doc.stage - 1]
            expected = doc.version - 1
        else:
            owner, status, event = STAGES[0]
            expected = doc.version + 1
        try:
            self.clients[owner].emit(
                event_id=f"{doc.document_id}-stale-{uuid.uuid4().hex[:6]}",
                event_type=event,
                document_id=doc.document_id,
                next_owner=owner,
                status=status,
                expected_version=expected,
            )
        except ContractError:
            self.rejected += 1
        else:
            raise AssertionError(f"the contract accepted a stale change of {doc.document_id}")

    def _deadline(self, overdue: bool) -> datetime:
        now = datetime.now(UTC)
        if overdue:
            return now - timedelta(minutes=self.rng.randint(5, 180))
        return now + timedelta(minutes=self.rng.randint(20, 240))


def seed(pipeline: Pipeline, count: int, console: Console) -> None:
    """Documents at every stage: 2 in 10 at routing, 3 at review, 3 at finalization,
    2 finished; every seventh overdue where it waits; a few rejected attempts."""
    columns = (
        TextColumn("seeding invoices"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("seed", total=count)
        for i in range(count):
            target = (0, 0, 1, 1, 1, 2, 2, 2, 3, 3)[i % 10]
            late = i % 7 == 0
            doc = pipeline.create(overdue=late and target == 0)
            while doc.stage < target:
                if doc.stage == 1 and i % 3 == 0:
                    pipeline.progress(doc, "checking the amounts")
                pipeline.advance(doc, overdue=late and doc.stage + 1 == target)
            if i % 11 == 0:
                pipeline.stale_attempt(doc)
            bar.advance(task)
