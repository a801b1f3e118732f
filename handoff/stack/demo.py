"""``handoff demo``: a small invoice pipeline to look at in the tracker.

Three services, each acting through its own ``HandoffClient`` (direct mode,
its own database role): ``routing`` creates invoices and routes them,
``review`` checks them, ``finalization`` approves and finishes them. The
seed leaves documents at every stage, a few overdue and a few rejected
attempts; while the tracker is served a trickle keeps work moving so the
overview changes as you watch. Credentials are kept in
``<home>/demo.json`` (0600) and reused by the next demo.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from handoff.core.client import HandoffClient
from handoff.core.errors import (
    AlreadyExists,
    ConflictingEventReuse,
    ContractError,
    ServiceExists,
)
from handoff.core.identity import Credential
from handoff.core.services import add_service, has_credential
from handoff.core.settings import HandoffSettings

log = logging.getLogger("handoff.demo")

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
class DemoCredentials:
    tenant: str
    credentials: dict[str, str]
    next_number: int = 1001

    @property
    def viewer(self) -> Credential:
        return Credential.parse(self.credentials["viewer"])


def _load(path: Path) -> DemoCredentials | None:
    try:
        raw = json.loads(path.read_text())
        return DemoCredentials(raw["tenant"], raw["credentials"], raw.get("next_number", 1001))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(path: Path, demo: DemoCredentials) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "tenant": demo.tenant,
                "credentials": demo.credentials,
                "next_number": demo.next_number,
            }
        )
    )


def demo_services(settings: HandoffSettings, home: Path) -> DemoCredentials:
    """The demo tenant's services: reused when still registered, else registered anew."""
    path = home / "demo.json"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        known = _load(path)
        if known and all(
            name in known.credentials
            and has_credential(conn, Credential.parse(known.credentials[name]), known.tenant)
            for name in SERVICES
        ):
            return known
        # "demo" unless it is taken (by an earlier demo whose credentials this
        # home does not have): then a tenant of our own.
        for tenant in ("demo", f"demo-{uuid.uuid4().hex[:6]}"):
            try:
                creds = {
                    name: add_service(conn, name, tenant=tenant, can_create=name == "routing").token
                    for name in SERVICES
                }
                break
            except ServiceExists:
                continue
        else:
            raise ServiceExists("no free tenant for the demo's services")
    demo = DemoCredentials(tenant, creds)
    _save(path, demo)
    return demo


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
        _save(self.home / "demo.json", self.demo)  # where the next demo's numbers start
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


class Trickle(threading.Thread):
    """Keeps work moving while the tracker is served: a new invoice or a step
    forward every ``every_s`` seconds."""

    def __init__(self, pipeline: Pipeline, every_s: float = 2.0) -> None:
        super().__init__(name="demo-trickle", daemon=True)
        self.pipeline = pipeline
        self.every_s = every_s
        self.stopping = threading.Event()
        self.steps = 0

    def run(self) -> None:
        rng = self.pipeline.rng
        while not self.stopping.wait(self.every_s):
            try:
                open_docs = [d for d in self.pipeline.docs if d.stage < len(STAGES)]
                if not open_docs or rng.random() < 0.35:
                    self.pipeline.create(overdue=rng.random() < 0.1)
                else:
                    # Oldest first, like a real queue, with some randomness.
                    doc = min(
                        rng.sample(open_docs, min(3, len(open_docs))), key=lambda d: d.version
                    )
                    self.pipeline.advance(doc, overdue=rng.random() < 0.1)
                self.steps += 1
            except Exception as exc:  # the demo keeps going; the tracker shows what happened
                log.warning("demo step failed: %s", exc)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)


def summary(pipeline: Pipeline) -> dict[str, Any]:
    at = {owner: 0 for owner, _, _ in STAGES}
    finished = 0
    for doc in pipeline.docs:
        if doc.stage < len(STAGES):
            at[STAGES[doc.stage][0]] += 1
        else:
            finished += 1
    return {"waiting": at, "finished": finished, "rejected": pipeline.rejected}
