"""A hypothesis state machine: the real contract against a small reference model.

The model states the rules of DESIGN.md "The emit contract" in plain Python,
in the same order of precedence; every step's outcome (receipt or error
code) and the per-owner counts must agree with PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from handoff.core import errors
from handoff.core.client import HandoffClient
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from tests.fix_contract import counts

SERVICES = {"alpha": True, "beta": True, "gamma": False}  # name -> may create
DOCS = ("d1", "d2", "d3")
STATUSES = ("new", "work", "done")


@dataclass
class Doc:
    run: int
    owner: str | None
    version: int


class Model:
    def __init__(self) -> None:
        self.docs: dict[str, Doc] = {}
        self.receipts: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}

    def counts(self) -> dict[str, int]:
        return dict(Counter(d.owner for d in self.docs.values() if d.owner is not None))

    def apply(self, request: tuple[Any, ...]) -> tuple[Any, ...] | str:
        """The expected outcome: (doc, run, version, owner, status[, 'replayed']) or a code."""
        kind, event_id, sender, doc_id, next_owner, status, expected = request
        if event_id in self.receipts:
            stored, receipt = self.receipts[event_id]
            return (*receipt, "replayed") if stored == request else "ConflictingEventReuse"
        doc = self.docs.get(doc_id)
        if kind in ("create", "run"):
            if not SERVICES[sender]:
                return "NotPermitted"
            if kind == "create":
                if doc is not None:
                    return "AlreadyExists"
                doc = self.docs[doc_id] = Doc(1, next_owner, 1)
            else:
                if doc is None:
                    return "DocumentNotFound"
                if doc.owner is not None:
                    return "RunInProgress"
                doc = self.docs[doc_id] = Doc(doc.run + 1, next_owner, 1)
        else:
            if doc is None:
                return "DocumentNotFound"
            if doc.owner != sender:
                return "OwnershipMismatch"
            if doc.version != expected:
                return "VersionMismatch"
            doc.owner, doc.version = next_owner, doc.version + 1
        receipt = (doc_id, doc.run, doc.version, doc.owner, status)
        self.receipts[event_id] = (request, receipt)
        return receipt


class ContractMachine(RuleBasedStateMachine):
    database_url: str

    def __init__(self) -> None:
        super().__init__()
        self.tenant = f"m-{uuid.uuid4().hex[:10]}"
        self.admin = psycopg.connect(self.database_url, autocommit=True)
        self.clients = {
            name: HandoffClient.direct(
                add_service(self.admin, name, tenant=self.tenant, can_create=may),
                self.database_url,
                pool_size=1,
            )
            for name, may in SERVICES.items()
        }
        self.model = Model()
        self.sent: list[tuple[Any, ...]] = []

    def teardown(self) -> None:
        for client in self.clients.values():
            client.close()
        self.admin.close()

    def _send(self, request: tuple[Any, ...]) -> None:
        expected = self.model.apply(request)
        self.sent.append(request)
        kind, event_id, sender, doc_id, next_owner, status, expected_version = request
        client = self.clients[sender]
        try:
            if kind == "create":
                r = client.create(
                    event_id=event_id, document_id=doc_id, owner=next_owner, status=status
                )
            elif kind == "run":
                r = client.start_run(
                    event_id=event_id, document_id=doc_id, owner=next_owner, status=status
                )
            else:
                r = client.emit(
                    event_id=event_id,
                    event_type="step",
                    document_id=doc_id,
                    next_owner=next_owner,
                    status=status,
                    expected_version=expected_version,
                )
        except errors.ContractError as exc:
            assert exc.code == expected, (request, expected)
            return
        got = (r.document_id, r.run_id, r.version, r.owner, r.status)
        actual = (*got, "replayed") if r.replayed else got
        assert actual == expected, (request, expected)

    owners = st.sampled_from(sorted(SERVICES))
    fresh_id = st.builds(lambda: str(uuid.uuid4()))

    @rule(sender=owners, doc=st.sampled_from(DOCS), owner=owners, event_id=fresh_id)
    def create(self, sender: str, doc: str, owner: str, event_id: str) -> None:
        self._send(("create", event_id, sender, doc, owner, "new", None))

    @rule(sender=owners, doc=st.sampled_from(DOCS), owner=owners, event_id=fresh_id)
    def start_run(self, sender: str, doc: str, owner: str, event_id: str) -> None:
        self._send(("run", event_id, sender, doc, owner, "new", None))

    @rule(
        doc=st.sampled_from(DOCS),
        sender=st.one_of(st.none(), owners),  # None: the current owner
        next_owner=st.one_of(st.none(), owners),
        status=st.sampled_from(STATUSES),
        drift=st.sampled_from([0, 0, 0, -1, 1]),
        event_id=fresh_id,
    )
    def emit(
        self,
        doc: str,
        sender: str | None,
        next_owner: str | None,
        status: str,
        drift: int,
        event_id: str,
    ) -> None:
        state = self.model.docs.get(doc)
        if sender is None:
            sender = (state.owner if state else None) or "alpha"
        version = (state.version if state else 1) + drift
        self._send(("handoff", event_id, sender, doc, next_owner, status, max(1, version)))

    @rule(data=st.data())
    def resend_identical(self, data: st.DataObject) -> None:
        if self.sent:
            self._send(data.draw(st.sampled_from(self.sent)))

    @rule(data=st.data(), status=st.sampled_from(STATUSES))
    def reuse_event_id_with_other_content(self, data: st.DataObject, status: str) -> None:
        if self.sent:
            old = data.draw(st.sampled_from(self.sent))
            self._send((*old[:5], status + "-changed", old[6]))

    @invariant()
    def counts_agree(self) -> None:
        assert counts(self.admin, self.tenant) == self.model.counts()


@pytest.mark.slow
def test_contract_matches_reference_model(migrated: HandoffSettings) -> None:
    ContractMachine.database_url = migrated.database_url
    run_state_machine_as_test(
        ContractMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
