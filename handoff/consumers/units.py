"""The work of a consumer on its database: guard, ordering, handler, set-aside; retries.

One unit of work (core/tx.py) per batch: the guard rows, the positions, the
handlers' effects and their next handoffs commit together or not at all.
The Kafka offset is committed by the runtime only after that commit, so a
crash anywhere redelivers, and the guard turns the redelivery into a no-op.

A batch that fails is rolled back and its events are taken one at a time,
so one poison event costs its neighbours a second try, never their effect.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg
from opentelemetry.trace import SpanKind
from psycopg.types.json import Jsonb

from handoff.consumers import metrics
from handoff.consumers.app import Consumer, Handler
from handoff.consumers.decoding import Decoder
from handoff.consumers.event import Event, Position
from handoff.consumers.failures import Category, HeldBack, describe
from handoff.consumers.settings import ConsumerSettings
from handoff.consumers.verdicts import Verdict
from handoff.consumers.wrappers import (
    OneEvent,
    Step,
    Unit,
    UnitWrapper,
    claimed,
    quarantined,
    retried,
)
from handoff.core import db
from handoff.core import guards_sql as guards
from handoff.core.db import raise_if_lost
from handoff.core.errors import (
    DatabaseUnavailable,
    EventNotClaimed,
    MalformedEvent,
    NotQueueable,
    UnitRolledBack,
)
from handoff.core.tx import HandoffTx, transact
from handoff.core.unit_queue import UnitQueue
from handoff.core.wire import Statement, json_text
from handoff.telemetry import logs, tracing

log = logging.getLogger("handoff.consumers")

SWEEP_LIMIT = 200


@dataclass
class Item:
    """One message to process: decoded (``event``) or not (``malformed``).

    ``kind``/``entry`` name set-aside work taken back ("parked" or
    "quarantine" and its id); ``expired``: a gap whose wait ran out.
    """

    position: Position
    event: Event | None = None
    malformed: MalformedEvent | None = None
    kind: str | None = None
    entry: int | None = None
    expired: bool = False


class StillWaiting(Exception):
    """Set-aside work that must keep waiting: the unit rolls back and leaves it."""


def _identity(item: Item) -> dict[str, Any]:
    if item.event is not None:
        return item.event.identity()
    return {
        "topic": item.position.topic,
        "partition": item.position.partition,
        "offset": item.position.offset,
        "eventId": item.position.headers.get("eventId"),
        "eventType": item.position.headers.get("eventType"),
    }


class Processor:
    """A consumer's units on one connection, composed of wrappers (wrappers.py).

    ``speculate``: a lone event claims itself with the handler's writes, in one
    round trip, before the verdict is read (consumer_claim); False: the verdict
    is always read first (a replay records every verdict). ``unit_wrappers``
    wrap the unit inside its transaction, outermost first.
    """

    def __init__(
        self,
        app: Consumer,
        conn: psycopg.Connection[Any],
        config: ConsumerSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        speculate: bool = True,
        unit_wrappers: Sequence[UnitWrapper] = (),
        tenant: str | None = None,
    ) -> None:
        self.app, self.conn, self.config = app, conn, config
        # The consumer's tenant (runtime.py learns it at connect): every call of a unit
        # names it, which on Citus keeps the unit on one node (by_tenant.sql).
        self.tenant = tenant
        self.policy = config.retry_policy()
        self._types = app.event_types
        self.failed: Item | None = None
        unit: Unit = self.unit
        for wrap in reversed(unit_wrappers):
            unit = wrap(unit)
        self._unit = unit
        through = claimed(self._step, self._claimed_unit) if speculate else self._step
        self._through = self._timed(through)
        self._one = self._one_event(self._through, sleep)
        # Verdict first from the start: an event whose queued claim refused it.
        self._verdict_first = self._one_event(self._timed(self._step), sleep)
        # Handlers whose unit could not be queued (they read): consumers/queued.py.
        self._unqueueable: set[str] = set()
        # The connection's queue of units sent ahead: one per session, which holds the
        # queue's prepared statements.
        self.unit_queue = UnitQueue(conn)
        # Whether units may be sent ahead (consumers/queued.py). Not on Citus: there a
        # unit sent ahead is no transaction. Its statements are an implicit block up to
        # the Sync, not a transaction block, so Citus hands the claim to the tenant's
        # worker as a statement of its own, which commits there by itself: a unit whose
        # later write failed left its guard row committed and its effect not (seen with
        # Citus 14.0.1: the event was then a "duplicate", never applied). And only on an
        # autocommit connection: the units send no BEGIN of their own.
        self.queueable = speculate and conn.autocommit and not db.on_citus(conn)

    def _one_event(self, through: Step, sleep: Callable[[float], None]) -> OneEvent:
        return quarantined(
            retried(through, self.policy, sleep=sleep, on_retry=self._retrying,
                    lost=self._raise_if_lost),
            self.quarantine,
        )  # fmt: skip

    # -- one unit ----------------------------------------------------------------

    def _hold(
        self,
        tx: HandoffTx,
        reason: str,
        item: Item,
        *,
        category: Category | None = None,
        error: str | None = None,
        attempts: int = 1,
        wait_s: float | None = None,
    ) -> None:
        handler = self._handler(item)
        tx.execute(*tx.by_tenant(
            guards.HOLD, guards.HOLD_FOR,
            {
                "reason": reason,
                "event": Jsonb(_identity(item)),
                "key": item.position.key,
                "value": item.position.value,
                "headers": Jsonb(item.position.headers),
                "category": category.value if category else None,
                "error": error,
                "attempts": attempts,
                "handler": handler.name if handler else None,
                "handler_version": handler.version if handler else None,
                "wait_s": wait_s,
            },
        ))  # fmt: skip

    def _handler(self, item: Item) -> Handler | None:
        return self.app.handlers.get(item.event.event_type) if item.event else None

    def unit(self, tx: HandoffTx, items: list[Item], reconcile: bool = False) -> list[Verdict]:
        """Guard, order and handle ``items`` (all decoded) in ``tx``; one verdict each."""
        set_aside = items[0].kind if len(items) == 1 else None
        if set_aside is not None:
            take = {"kind": set_aside, "id": items[0].entry}
            taken = tx.execute(*tx.by_tenant(guards.TAKE, guards.TAKE_FOR, take)).fetchone()
            if not (taken and taken[0]):
                return [Verdict.GONE]  # another process of this consumer took it first
        params = {**self._guard_params(items), "reconcile": reconcile}
        with tracing.span("guard", attributes={"handoff.events": len(items)}):
            found = tx.execute(
                *tx.by_tenant(guards.VERDICTS, guards.VERDICTS_FOR, params)
            ).fetchall()
        verdicts = [(Verdict(v), d) for v, d in found]
        for item, (verdict, detail) in zip(items, verdicts, strict=True):
            assert item.event is not None
            if verdict is Verdict.APPLY:
                self.failed = item  # until the handler returns: the batch's culprit
                self._apply(tx, item.event, detail)
                self.failed = None
            elif verdict in (Verdict.PARK, Verdict.GAP) and set_aside is not None:
                raise StillWaiting(verdict)
            elif verdict is Verdict.PARK:
                self._hold(tx, "behind_quarantine", item)
            elif verdict is Verdict.GAP:
                self._hold(tx, "gap", item, wait_s=self.config.gap_wait_s)
            elif verdict is Verdict.FUTURE:
                raise HeldBack(Category.UNEXPECTED_VERSION, f"unexpected future version: {detail}")
            elif verdict is Verdict.CONFLICT:
                raise HeldBack(
                    Category.CONFLICTING_REUSE,
                    f"event id {item.event.event_id} was taken before with other content",
                )
        return [verdict for verdict, _ in verdicts]

    def _guard_params(self, items: list[Item]) -> dict[str, Any]:
        events = [item.event.identity() for item in items if item.event is not None]
        return {"events": Jsonb(events, json_text), "types": self._types, "owner": self.app.owner}

    def claim_unit(self, tx: HandoffTx, item: Item) -> list[Verdict]:
        """One event, its handler run before the guard's verdict is read.

        The claim goes first in the unit's one message, so the handler's
        writes commit only if the event was to be applied; otherwise the
        claim raises and everything rolls back. Running a handler whose
        work may roll back is what a retried unit already does
        (core/tx.py), so a handler needs no new care.
        """
        assert item.event is not None
        # The claim goes with the unit's next message (the handler's first read, or the
        # commit): its span marks when it was queued, and the unit's span holds it.
        with tracing.span("claim", attributes={"handoff.claim": "with the next message"}):
            self._claim(tx, [item])
        try:
            self._apply(tx, item.event, None)
        except Exception as exc:
            # Whether the handler failed an event it was to apply (a real
            # attempt) or one the guard would have kept from it: the claim,
            # if still unsent, tells.
            if not unclaimed(exc):
                try:
                    tx.flush()
                except EventNotClaimed:
                    raise
                except Exception as other:  # the claim had gone earlier: a real attempt
                    log.debug("%s: after the handler's failure: %s", self.app.name, other)
            raise
        return [Verdict.APPLY]

    def _claim(self, tx: HandoffTx, items: list[Item]) -> None:
        """The claim of ``items``, deferred: it goes first in the unit's next message and
        raises (EventNotClaimed) unless every one of them is to be applied now."""
        if len(items) == 1 and (event := items[0].event) is not None:
            one = {
                "event_id": event.event_id,
                "fingerprint": event.fingerprint,
                "document_id": event.document_id,
                "run_id": event.run_id,
                "version": event.version,
                "types": self._types,
                "owner": self.app.owner,
            }
            tx.write(*tx.by_tenant(guards.CLAIM_ONE, guards.CLAIM_ONE_FOR, one))
            return
        tx.write(*tx.by_tenant(guards.CLAIM, guards.CLAIM_FOR, self._guard_params(items)))

    def _apply(self, tx: HandoffTx, event: Event, skipped: str | None) -> None:
        handler = self.app.handlers[event.event_type]
        if skipped:
            # The wait for earlier versions ran out: the database holds them,
            # and this event carries the state after them (DESIGN.md "Events").
            log.info(
                "%s: %s v%s reconciled past versions %s",
                self.app.name,
                event.document_id,
                event.version,
                skipped,
            )
        if not handler.matches(event):
            metrics.EVENTS.labels(self.app.name, "unmatched").inc()
            return
        rejected = len(tx.rejections)
        with tracing.span(
            f"handle {event.event_type}",
            attributes={"handoff.handler": handler.name, "handoff.document": event.document_id,
                        "handoff.version": event.version, "handoff.event_id": event.event_id},
        ) as span:  # fmt: skip
            if span is not None:
                tx.spans = tracing.emit_span
            handler.fn(event, tx)
        if len(tx.rejections) > rejected:
            # The handler's handoff was refused: an invalid transition. The
            # unit rolls back, so the guard lets a repaired retry through.
            tx.rejections[rejected].raise_()

    # -- running units -------------------------------------------------------------

    def _step(self, items: list[Item], reconcile: bool) -> list[Verdict]:
        """The verdict-first unit, in a transaction of its own (retried on conflicts).

        On the consumer's autocommit connection guards.VERDICTS goes with the guard's
        statement and the handlers' writes go with COMMIT (core/tx.py): two
        round trips a unit, plus one per statement whose result a handler reads.
        """
        try:
            return transact(
                self.conn,
                lambda tx: self._unit(tx, items, reconcile),
                tenant=self.tenant,
                trace=tracing.current_traceparent(),
            )
        except StillWaiting:
            return [Verdict.WAITING]

    def _timed(self, step: Step) -> Step:
        def run(items: list[Item], reconcile: bool) -> list[Verdict]:
            started = time.perf_counter()
            try:
                with self._unit_span(items):
                    return step(items, reconcile)
            finally:
                metrics.UNIT_SECONDS.labels(self.app.name).observe(time.perf_counter() - started)

        return run

    def _unit_span(self, items: list[Item]) -> AbstractContextManager[Any]:
        """One attempt of a unit as a span: the child of its event's trace (the header
        the relay sent), or, for a batch, a new one linked to each event's."""
        if not tracing.enabled():
            return nullcontext()
        carried = [item.position.headers.get("traceparent") for item in items]
        first = items[0].position
        return tracing.span(
            f"consume {self.app.name}",
            parent=carried[0] if len(items) == 1 else None,
            links=carried if len(items) > 1 else (),
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.destination.name": first.topic,
                "messaging.kafka.offset": first.offset if len(items) == 1 else None,
                "messaging.batch.message_count": len(items),
                "handoff.consumer": self.app.name,
                "handoff.document": items[0].event.document_id if items[0].event else None,
            },
        )

    def _claimed_unit(self, item: Item) -> list[Verdict] | None:
        """The one-round-trip unit; None when the claim refused and the long way decides."""
        try:
            return transact(
                self.conn,
                lambda tx: self.claim_unit(tx, item),
                tenant=self.tenant,
                trace=tracing.current_traceparent(),
            )
        except Exception as exc:
            # UnitRolledBack: a handler swallowed an error, perhaps the claim's;
            # the long way tells which.
            if not (unclaimed(exc) or isinstance(exc, UnitRolledBack)):
                raise  # the handler failed an event it was to apply: an attempt
        # Not to be applied now (a duplicate, a stale or parked event, a gap).
        metrics.UNCLAIMED.labels(self.app.name).inc()
        return None

    def _raise_if_lost(self, exc: BaseException) -> None:
        raise_if_lost(self.conn, exc)  # the runtime reconnects and takes the batch again

    def run_batch(self, items: list[Item]) -> None:
        """All of ``items`` in one unit; on any failure, each alone."""
        decoded = [item for item in items if item.event is not None]
        for item in items:
            if item.event is None:
                self.run_one(item)
        self.failed = None
        if len(decoded) > 1:
            try:
                self._count(self._through(decoded, False))
                return
            except DatabaseUnavailable:
                raise
            except Exception as exc:  # a poison event among them: isolate it
                self._raise_if_lost(exc)
                log.info(
                    "%s: batch of %d failed (%s); one by one", self.app.name, len(decoded), exc
                )
        culprit, self.failed = self.failed, None
        for item in decoded:
            # The handler call that failed the batch counts as a delivery.
            self.run_one(item, spent=1 if item is culprit else 0)

    def run_one(
        self, item: Item, *, spent: int = 0, failed: Exception | None = None, claim: bool = True
    ) -> Verdict:
        """One event, retried by its failure class; quarantined when retries cannot help.

        Answers what became of it: a verdict of the guard, ``WAITING`` or
        ``QUARANTINED``. ``failed``: its first attempt here already ran and failed so
        (a queued unit's); ``claim`` False: the verdict first from the start (a queued
        claim refused it).
        """
        one = self._one if claim else self._verdict_first
        with logs.bound(consumer=self.app.name, tenant=self.tenant, **_log_fields(item)):
            verdict = one(item, spent, failed)
        if verdict not in (Verdict.WAITING, Verdict.QUARANTINED):  # quarantine() counts its own
            self._count([verdict])
        return verdict

    # -- units sent ahead (consumers/queued.py) ----------------------------------------

    def queued_unit(self, items: list[Item]) -> list[Statement] | None:
        """``items``' claimed unit as the statements to send ahead, their handlers run; None
        when a handler uses the connection (a read, an effect intent): its events then go
        the usual way, and so do that handler's later ones.

        The claim (consumer_claim) refuses unless every event is to be applied now, so a
        unit sent ahead commits only the events it was right to apply. A handler that
        raises is not caught here: whether its event was to be applied is not known yet,
        and the usual way runs it again and counts it.
        """
        assert all(item.event is not None for item in items)
        if not self.queueable:
            return None
        if tracing.enabled() and any(i.position.headers.get("traceparent") for i in items):
            return None  # a traced event: its unit's span and rows continue its trace
        handlers = {self._handler(item) for item in items}
        if any(h is None or h.name in self._unqueueable for h in handlers):
            return None
        tx = HandoffTx(self.conn, self.tenant, queued=True)
        try:
            self._claim(tx, items)
            for item in items:
                assert item.event is not None
                with logs.bound(consumer=self.app.name, tenant=self.tenant, **_log_fields(item)):
                    self._apply(tx, item.event, None)
        except NotQueueable:
            for h in handlers:
                if h is not None:
                    self._unqueueable.add(h.name)
            log.info("%s: handler(s) %s read in their unit: their events are not sent ahead",
                     self.app.name, ", ".join(sorted(h.name for h in handlers if h)))  # fmt: skip
            return None
        return tx.statements()

    def after_queued(self, items: list[Item], error: Exception | None, seconds: float) -> None:
        """What became of ``items``' unit sent ahead (``error``, or None once committed,
        ``seconds`` after it was sent): counted as the usual way counts it, or the events
        go the usual way now, verdict first when the claim refused them."""
        if error is None:
            metrics.UNIT_SECONDS.labels(self.app.name).observe(seconds)
            self._count([Verdict.APPLY] * len(items))
            return
        self._raise_if_lost(error)  # the runtime reconnects and takes the rest again
        refused = unclaimed(error) or isinstance(error, UnitRolledBack)
        if refused:
            metrics.UNCLAIMED.labels(self.app.name).inc()
        if len(items) > 1:
            # Verdict first (a batch is never claimed the usual way); a batch that fails
            # again there is taken one event at a time, as any batch is.
            self.run_batch(items)
        elif refused:
            self.run_one(items[0], claim=False)
        else:  # an attempt of the event's, as if made the usual way
            self.run_one(items[0], failed=error)

    def _retrying(self, item: Item, attempts: int, category: Category, exc: Exception) -> None:
        metrics.RETRIES.labels(self.app.name, category.value).inc()
        log.warning("%s: attempt %d at %s failed (%s); retrying", self.app.name, attempts,
                    _where(item), describe(exc))  # fmt: skip

    def quarantine(self, item: Item, category: Category, error: str, attempts: int) -> None:
        """Set the event aside for a person; its document's later events wait behind it."""

        def record(tx: HandoffTx) -> None:
            if item.kind == "parked":
                tx.execute(*tx.by_tenant(guards.TAKE, guards.TAKE_FOR,
                                         {"kind": "parked", "id": item.entry}))  # fmt: skip
            self._hold(tx, "quarantine", item, category=category, error=error, attempts=attempts)

        transact(self.conn, record, tenant=self.tenant)
        metrics.EVENTS.labels(self.app.name, Verdict.QUARANTINED.outcome).inc()
        log.error("%s: quarantined %s: %s: %s", self.app.name, _where(item), category, error)

    def _count(self, verdicts: list[Verdict]) -> None:
        # One labels() lookup per outcome, not per event: a batch is mostly one outcome.
        for outcome, n in Counter(v.outcome for v in verdicts).items():
            metrics.EVENTS.labels(self.app.name, outcome).inc(n)


def unclaimed(exc: BaseException | None) -> bool:
    """The claim refused the event, whatever the handler made of that error."""
    while exc is not None:
        if isinstance(exc, EventNotClaimed):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _log_fields(item: Item) -> dict[str, Any]:
    """What a JSON log line says of the event in hand (telemetry/logs.py)."""
    if item.event is not None:
        e = item.event
        return {"documentId": e.document_id, "eventId": e.event_id, "version": e.version}
    p = item.position
    where = f"{p.topic}[{p.partition}]@{p.offset}"
    return {"eventId": p.headers.get("eventId"), "kafkaPosition": where}


def _where(item: Item) -> str:
    p = item.position
    what = f"{item.event.document_id} v{item.event.version}" if item.event else "undecodable"
    return f"{what} ({p.topic}[{p.partition}]@{p.offset})"


def sweep(processor: Processor, reads: psycopg.Connection[Any], decoder: Decoder) -> int:
    """Take back parked events whose turn came and the retries a person asked for."""
    rows = reads.execute(guards.DUE, {"limit": SWEEP_LIMIT}).fetchall()
    for kind, entry, topic, partition, offset, key, value, headers, expired in rows:
        position = Position(topic, partition, offset, key, bytes(value or b""), headers)
        item = Item(position, kind=kind, entry=entry, expired=expired)
        try:
            item.event = decoder.decode(position.value, position)
        except MalformedEvent as exc:
            item.malformed = exc
        processor.run_one(item)
    return len(rows)
