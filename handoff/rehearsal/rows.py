"""The five rows of the concurrent-delivery rehearsal, and the lock-timeout case.

Each row places its own order in a scratch tenant, delivers the order's
real wire-format event (the outbox payload, encoded with the registry's
schema id and decoded through the registry, as a consumer receives it) to
the same ``Processor`` the consumer runtime uses, runs the same
``Executor`` against the sandbox provider, injects its failure, and
captures the evidence: the order, guard rows, intent and its history,
quarantine entries, and the provider's records.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
from psycopg.conninfo import make_conninfo

from handoff.consumers.app import Consumer
from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.event import Position
from handoff.consumers.executor import Executor
from handoff.consumers.providers import SandboxPayments
from handoff.consumers.settings import ConsumerSettings, EffectSettings
from handoff.consumers.units import Item, Processor
from handoff.core import outbox_sql
from handoff.core.client import HandoffClient
from handoff.core.events import encode, to_record
from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.core.tx import transact
from handoff.rehearsal.evidence import capture
from handoff.rehearsal.orders import PAYMENTS, SHIPPING, SHOP, Knobs, SimulatedCrash, payments_app
from handoff.relay.kafka_io import register_schemas


@dataclass
class Row:
    number: str
    injected: str
    local: str
    external: str
    local_ok: bool = False
    external_ok: bool = False
    found_local: str = ""
    found_external: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.local_ok and self.external_ok


class Rehearsal:
    """The scratch tenant, its services, and the rows run against them."""

    def __init__(
        self,
        settings: HandoffSettings,
        provider_url: str,
        *,
        tenant: str | None = None,
        topic: str = "handoff.events",
    ) -> None:
        self.settings = settings
        self.tenant = tenant or f"rehearsal-{uuid.uuid4().hex[:8]}"
        self.admin = psycopg.connect(settings.database_url, autocommit=True)
        self.creds: dict[str, Credential] = {
            name: add_service(self.admin, name, tenant=self.tenant, can_create=name == SHOP)
            for name in (SHOP, PAYMENTS, SHIPPING)
        }
        self.schema, ids = register_schemas(settings.schema_registry_url, [topic])
        self.schema_id, self.topic = ids[topic], topic
        self.decoder = Decoder(settings.schema_registry_url, reader_schema(None))
        self.provider_http = httpx.Client(base_url=provider_url, timeout=10)
        self.knobs = Knobs()
        self.provider = SandboxPayments(provider_url, timeout_s=2.0)
        self.app: Consumer = payments_app(self.creds[PAYMENTS], self.provider, self.knobs)
        self.shop = HandoffClient.direct(self.creds[SHOP], settings.database_url, pool_size=1)
        self._conns: list[psycopg.Connection[Any]] = []
        self._orders = 0
        self._offset = 0

    # -- parts ------------------------------------------------------------------------

    def _service_conn(self, name: str) -> psycopg.Connection[Any]:
        cred = self.creds[name]
        info = make_conninfo(self.settings.database_url, user=cred.role, password=cred.secret)
        conn = psycopg.connect(info, autocommit=True)  # units BEGIN themselves
        self._conns.append(conn)
        return conn

    def processor(self) -> Processor:
        config = ConsumerSettings(retry_base_s=0.0, max_deliveries=3)
        return Processor(self.app, self._service_conn(PAYMENTS), config, sleep=lambda _: None,
                         tenant=self.tenant)  # fmt: skip

    def executor(self) -> Executor:
        config = EffectSettings(retry_base_s=0.0, retry_max_s=0.0, lease_s=30)
        return Executor(self.app, self._service_conn(PAYMENTS), config, worker="rehearsal")

    def order(self, amount: int = 4200) -> tuple[str, dict[str, Any]]:
        """Place an order; answer its id and the accepted change's outbox payload."""
        self._orders += 1
        doc = f"order-{self._orders}-{uuid.uuid4().hex[:6]}"
        receipt = self.shop.create(
            event_id=str(uuid.uuid4()),
            document_id=doc,
            owner=PAYMENTS,
            status="placed",
            data={"amount": amount, "currency": "EUR"},
        )
        return doc, self.payload(receipt.event_id)

    def payload(self, event_id: str) -> dict[str, Any]:
        """The outbox envelope of an accepted event of the scratch tenant."""
        row = self.admin.execute(
            outbox_sql.EVENT_PAYLOAD, {"tenant": self.tenant, "event_id": event_id}
        ).fetchone()
        assert row is not None, f"no accepted event {event_id}"
        return dict(row[0])

    def item(self, payload: dict[str, Any]) -> Item:
        """The event as a consumer receives it: registry-encoded bytes, decoded."""
        self._offset += 1
        value = encode(self.schema, self.schema_id, to_record(dict(payload), self.schema.version))
        position = Position(self.topic, 0, self._offset, None, value, {})
        return Item(position, event=self.decoder.decode(value, position))

    def evidence(self, doc: str) -> dict[str, Any]:
        return capture(
            self.admin, self.provider_http, tenant=self.tenant, consumer=PAYMENTS, document_id=doc
        )

    def arm(self, fault: dict[str, Any]) -> None:
        self.provider_http.post("/_sandbox/faults", json=fault).raise_for_status()

    # -- the rows ---------------------------------------------------------------------

    def _race(
        self, item: Item, *, pause_s: float, crash: bool, second: Processor
    ) -> tuple[str, str]:
        """Two deliveries of one event; the first holds its guard row uncommitted for
        ``pause_s`` and, with ``crash``, dies before its commit (one attempt, no retry)."""
        first = self.processor()
        verdicts: dict[str, str] = {}
        assert item.event is not None
        if crash:
            self.knobs.crash_once.add(item.event.document_id)

        def deliver_first() -> None:
            try:
                if crash:
                    transact(first.conn, lambda tx: first.unit(tx, [item]))
                    verdicts["first"] = "committed"
                else:
                    verdicts["first"] = first.run_one(item)
            except SimulatedCrash as exc:
                verdicts["first"] = f"failed: {exc}"

        def deliver_second() -> None:
            time.sleep(pause_s / 4)  # the first holds the guard row by now
            verdicts["second"] = second.run_one(item)

        self.knobs.pause_s = pause_s
        try:
            threads = [
                threading.Thread(target=deliver_first),
                threading.Thread(target=deliver_second),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            self.knobs.pause_s = 0.0
        return verdicts["first"], verdicts["second"]

    def row_race(self) -> Row:
        row = Row(
            "1",
            "two deliveries race for the guard",
            "only the winner applies the transition and creates its intent",
            "one operation identity is offered to the executor",
        )
        doc, payload = self.order()
        first, second = self._race(
            self.item(payload), pause_s=0.5, crash=False, second=self.processor()
        )
        drained = self.executor().drain()
        ev = self.evidence(doc)
        keys = {i["idempotency_key"] for i in ev["intents"]}
        intended = [h for h in ev["intent_history"] if h["to_state"] == "intended"]
        row.local_ok = (
            sorted((first, second)) == ["apply", "duplicate"]
            and len(ev["guards"]) == 1
            and len(ev["intents"]) == 1
            and len(intended) == 1
        )
        row.found_local = (
            f"verdicts {first}/{second}; guard rows {len(ev['guards'])}; "
            f"intents {len(ev['intents'])}"
        )
        row.external_ok = (
            len(keys) == 1 and len(ev["provider_records"]) == 1 and drained == 1
        ) and ev["provider_records"][0]["idempotencyKey"] in keys
        row.found_external = (
            f"keys offered {len(keys)}; provider records {len(ev['provider_records'])}"
        )
        row.evidence = ev
        return row

    def row_crash_before_commit(self) -> Row:
        row = Row(
            "2",
            "the winner fails before its commit",
            "guard, transition and intent are absent together",
            "no executor can act on an uncommitted intent",
        )
        doc, payload = self.order()
        item = self.item(payload)
        processor = self.processor()
        self.knobs.crash_once.add(doc)
        try:
            transact(processor.conn, lambda tx: processor.unit(tx, [item]))
            crashed = "no crash"
        except SimulatedCrash as exc:
            crashed = str(exc)
        executor = self.executor()
        claimed = executor.step()
        after_crash = self.evidence(doc)
        redelivered = processor.run_one(item)  # Kafka redelivers: nothing was lost
        executor.drain()
        ev = self.evidence(doc)
        order = after_crash["order"][0]
        row.local_ok = (
            crashed != "no crash"
            and not after_crash["guards"]
            and not after_crash["intents"]
            and order["version"] == 1
            and redelivered == "apply"
        )
        row.found_local = (
            f"after the crash: guard rows {len(after_crash['guards'])}, intents "
            f"{len(after_crash['intents'])}, order v{order['version']} {order['status']}; "
            f"redelivery: {redelivered}"
        )
        row.external_ok = (
            claimed == 0
            and not after_crash["provider_records"]
            and len(ev["provider_records"]) == 1
        )
        row.found_external = (
            f"claimed after the crash {claimed}; provider records then "
            f"{len(after_crash['provider_records'])}, after the redelivery "
            f"{len(ev['provider_records'])}"
        )
        row.evidence = {"after_crash": after_crash, "after_redelivery": ev}
        return row

    def row_ack_lost(self) -> Row:
        row = Row(
            "3",
            "the winner commits, its acknowledgement is lost",
            "redelivery recognises the committed work, no second transition",
            "the intent keeps its original identity",
        )
        doc, payload = self.order()
        item = self.item(payload)
        processor = self.processor()
        first = processor.run_one(item)
        before = self.evidence(doc)
        # The offset commit never happened: Kafka delivers the same bytes again.
        again = self.processor().run_one(self.item(payload))
        self.executor().drain()
        ev = self.evidence(doc)
        intent_before, intent_after = before["intents"][0], ev["intents"][0]
        row.local_ok = (
            (first, again) == ("apply", "duplicate")
            and len(ev["guards"]) == 1
            and before["order"][0]["version"] == 2
            and ev["order"][0]["status"] == "paid"
            and ev["order"][0]["version"] == 3
        )
        row.found_local = (
            f"verdicts {first}/{again}; guard rows {len(ev['guards'])}; order "
            f"v{before['order'][0]['version']} after the first delivery"
        )
        row.external_ok = (
            len(ev["intents"]) == 1
            and (intent_before["id"], intent_before["idempotency_key"])
            == (intent_after["id"], intent_after["idempotency_key"])
            and len(ev["provider_records"]) == 1
        )
        row.found_external = (
            f"intent {intent_after['id']} key {intent_after['idempotency_key']} unchanged; "
            f"provider records {len(ev['provider_records'])}"
        )
        row.evidence = ev
        return row

    def row_response_lost(self) -> Row:
        row = Row(
            "4",
            "the provider accepts, the executor loses the response",
            "the intent becomes unresolved (unknown), not failed",
            "reconciliation finds the original effect before deciding on retry: one charge",
        )
        doc, payload = self.order()
        self.arm({"kind": "drop", "reference": doc})
        verdict = self.processor().run_one(self.item(payload))
        executor = self.executor()
        executor.step()
        lost = self.evidence(doc)
        executor.step()  # the lookup before any retry
        ev = self.evidence(doc)
        intent_lost, intent = lost["intents"][0], ev["intents"][0]
        records = ev["provider_records"]
        row.local_ok = (
            verdict == "apply"
            and intent_lost["state"] == "unknown"
            and intent_lost["reconciliation"] == "pending"
            and intent["state"] == "succeeded"
            and intent["reconciliation"] == "reconciled"
            and intent["attempts"] == 1
        )
        row.found_local = (
            f"after the lost answer: {intent_lost['state']} ({intent_lost['reconciliation']}); "
            f"after the lookup: {intent['state']} ({intent['reconciliation']}), "
            f"submissions {intent['attempts']}"
        )
        row.external_ok = len(records) == 1 and intent["provider_ref"] == records[0]["id"]
        row.found_external = (
            f"provider records {len(records)}; intent's reference "
            f"{intent['provider_ref']} = {records[0]['id'] if records else '-'}"
        )
        row.evidence = {"after_lost_answer": lost, "after_reconciliation": ev}
        return row

    def row_conflicting_content(self) -> Row:
        row = Row(
            "5",
            "the same event id arrives with other content",
            "conflicting reuse is quarantined for review",
            "the conflicting payload authorises no effect",
        )
        doc, payload = self.order(amount=4200)
        processor = self.processor()
        first = processor.run_one(self.item(payload))
        forged = {**payload, "data": {**payload["data"], "amount": 999_999}}
        second = processor.run_one(self.item(forged))
        self.executor().drain()
        ev = self.evidence(doc)
        records = ev["provider_records"]
        row.local_ok = (
            (first, second) == ("apply", "quarantined")
            and [q["category"] for q in ev["quarantine"]] == ["conflicting_reuse"]
            and ev["quarantine"][0]["status"] == "open"
        )
        row.found_local = (
            f"verdicts {first}/{second}; quarantine "
            f"{[(q['category'], q['status']) for q in ev['quarantine']]}"
        )
        amounts = [r["amount"] for r in records]
        row.external_ok = len(ev["intents"]) == 1 and amounts == [4200]
        row.found_external = f"intents {len(ev['intents'])}; provider amounts {amounts}"
        row.evidence = ev
        return row

    def row_lock_timeout(self) -> Row:
        row = Row(
            "+",
            "a lock timeout during the race (the winner then fails)",
            "retried, never read as already done: the loser applies",
            "one operation identity, one charge",
        )
        doc, payload = self.order()
        second = self.processor()
        # The second delivery waits at most 100 ms for the first one's guard row.
        second.conn.execute("SET lock_timeout = '100ms'")
        second.conn.commit()
        started = time.monotonic()
        first, won = self._race(self.item(payload), pause_s=0.6, crash=True, second=second)
        waited = time.monotonic() - started
        drained = self.executor().drain()
        ev = self.evidence(doc)
        row.local_ok = (
            first.startswith("failed")
            and won == "apply"
            and len(ev["guards"]) == 1
            and len(ev["intents"]) == 1
        )
        row.found_local = (
            f"first {first.split(':')[0]}, second {won} after {waited:.2f} s of lock "
            f"timeouts and retries; guard rows {len(ev['guards'])}"
        )
        row.external_ok = drained == 1 and len(ev["provider_records"]) == 1
        row.found_external = f"provider records {len(ev['provider_records'])}"
        row.evidence = ev
        return row

    ROWS: tuple[Callable[[Rehearsal], Row], ...] = (
        row_race,
        row_crash_before_commit,
        row_ack_lost,
        row_response_lost,
        row_conflicting_content,
        row_lock_timeout,
    )

    def run(self, on_row: Callable[[Row], None] = lambda _: None) -> list[Row]:
        rows = []
        for make in self.ROWS:
            rows.append(found := make(self))
            on_row(found)
        return rows

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self.shop.close()
        self.provider.close()
        self.provider_http.close()
        self.decoder.close()
        self.admin.close()
