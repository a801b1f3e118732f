"""Workflow starts, "the data model is the trigger": a filtered consumer with batch
size 1 starts one run per matching document event, under a deterministic name."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from handoff.consumers.app import Consumer
from handoff.consumers.event import Event
from handoff.consumers.runtime import Runtime
from handoff.consumers.settings import ConsumerSettings
from handoff.consumers.units import Processor
from handoff.consumers.workflows import NAME, execution_name, start_workflow_on
from handoff.core import HandoffClient, handoff_tx
from handoff.core.effects import WorkflowRun
from handoff.core.errors import InvalidRequest
from handoff.core.tx import HandoffTx
from handoff.rehearsal.orders import PAYMENTS
from handoff.rehearsal.rows import Rehearsal


class Starter:
    """A workflow starter of the scratch tenant, fed the tenant's real events."""

    def __init__(self, r: Rehearsal, *, fail: bool = False) -> None:
        self.r = r
        self.app = Consumer(PAYMENTS, r.creds[PAYMENTS], owner=None)
        self.first_steps: list[str] = []

        def then(event: Event, run: WorkflowRun, tx: HandoffTx) -> None:
            if fail:
                raise RuntimeError("the first step fails every time")
            self.first_steps.append(run.execution_name)

        self.handler = start_workflow_on(
            self.app, "created", workflow="fulfil", where={"status": "pending"}, then=then
        )
        config = ConsumerSettings(retry_base_s=0.0)
        self.processor = Processor(
            self.app, r._service_conn(PAYMENTS), config, sleep=lambda _: None, tenant=r.tenant
        )

    def create(self, status: str) -> tuple[str, dict[str, Any]]:
        doc = f"req-{uuid.uuid4().hex[:6]}"
        receipt = self.r.shop.create(
            event_id=str(uuid.uuid4()), document_id=doc, owner=PAYMENTS, status=status,
            data={"podcast": "ep-1"},
        )  # fmt: skip
        return doc, self.r.payload(receipt.event_id)

    def deliver(self, payload: dict[str, Any]) -> str:
        return self.processor.run_one(self.r.item(payload))

    def runs(self, doc: str) -> list[dict[str, Any]]:
        with self.r.admin.cursor() as cur:
            cur.execute(
                "SELECT execution_name, event_id, started_by, input, status "
                "FROM handoff.workflow_runs WHERE tenant_id = %s AND document_id = %s",
                (self.r.tenant, doc),
            )
            names = [d.name for d in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def test_a_pending_creation_starts_one_run_with_a_deterministic_valid_name(
    rehearsal: Rehearsal,
) -> None:
    starter = Starter(rehearsal)
    doc, payload = starter.create("pending")
    assert starter.deliver(payload) == "apply"
    [run] = starter.runs(doc)
    assert run["execution_name"] == execution_name(doc, payload["eventId"])
    assert NAME.match(run["execution_name"])
    assert run["input"] == {"documentId": doc, "podcast": "ep-1"}
    assert starter.first_steps == [run["execution_name"]]
    # A redelivery is a duplicate; the run and its first step stay single.
    assert starter.deliver(payload) == "duplicate"
    assert len(starter.runs(doc)) == 1 and len(starter.first_steps) == 1


def test_starting_twice_finds_the_existing_run_and_other_input_is_refused(
    rehearsal: Rehearsal,
) -> None:
    conn = rehearsal._service_conn(PAYMENTS)
    args: dict[str, Any] = {
        "workflow": "fulfil", "execution_name": execution_name("d", "e"), "document_id": "d",
        "run_id": 1, "event_id": "e",
    }  # fmt: skip
    with handoff_tx(conn) as tx:
        first = tx.start_workflow(**args, input={"a": 1})
        tx.commit()
    with handoff_tx(conn) as tx:
        second = tx.start_workflow(**args, input={"a": 1})
        assert (first.created, second.created) == (True, False)
        assert second.started_at == first.started_at
        with pytest.raises(InvalidRequest, match="another input"):
            tx.start_workflow(**args, input={"a": 2})


def test_updates_and_other_statuses_do_not_start_a_run(rehearsal: Rehearsal) -> None:
    starter = Starter(rehearsal)
    doc, created = starter.create("pending")
    starter.deliver(created)
    with HandoffClient.direct(rehearsal.creds[PAYMENTS], rehearsal.settings.database_url) as c:
        moved = c.emit(event_id=str(uuid.uuid4()), event_type="created", document_id=doc,
                       next_owner=PAYMENTS, status="pending", expected_version=1)  # fmt: skip
    # An update, even one that reuses the type and the status, is a later version
    # of a run that started; a creation with another status does not match.
    assert starter.deliver(rehearsal.payload(moved.event_id)) == "apply"
    placed_doc, placed = starter.create("placed")
    assert starter.deliver(placed) == "apply"
    assert starter.runs(placed_doc) == []
    assert len(starter.runs(doc)) == 1


def test_three_failed_deliveries_quarantine_the_event_and_start_nothing(
    rehearsal: Rehearsal,
) -> None:
    starter = Starter(rehearsal, fail=True)
    doc, payload = starter.create("pending")
    assert starter.deliver(payload) == "quarantined"
    assert starter.runs(doc) == []
    row = rehearsal.admin.execute(
        "SELECT attempts, category FROM handoff.quarantine WHERE tenant_id = %s "
        "AND document_id = %s",
        (rehearsal.tenant, doc),
    ).fetchone()
    assert row == (3, "handler_error")


def test_a_starter_runs_with_batch_size_1_unless_told_otherwise(
    rehearsal: Rehearsal,
) -> None:
    starter = Starter(rehearsal)
    assert starter.app.batch_size == 1
    assert Runtime(starter.app, rehearsal.settings).config.batch_size == 1
    told = Runtime(starter.app, rehearsal.settings, ConsumerSettings(batch_size=5))
    assert told.config.batch_size == 5
