"""The relay: fetch pending outbox rows of owned slots, produce them, await acks, settle them.

A slot's bound passes rows only after the broker acknowledged them; a crash
anywhere before the bound is written republishes them (same event ids, so
duplicates are harmless to consumers).

Two threads form a pipeline so that the database's work and Python's work
overlap: the database thread owns the session (slots, fetching, bounds,
q.LISTEN, housekeeping) and fetches batch N+1 while the producer thread
encodes, produces and awaits the acks of batch N. Every fetch starts at the
bound and leaves out only the rows fetched above it. (Bounding
fetches by the last id seen instead would skip rows that got a lower id but
committed a moment later, until the pipeline ran dry: under steady load,
never. Measured: a band of events published only when the load stopped.)
A document's later rows may be fetched while its earlier ones are in
flight; they are produced after them, so Kafka keeps their order.

The outbox is append-only: instead of marking rows, the relay moves each
owned slot's bound (handoff.relay_cursors) past what is settled, proven so
that no late commit is skipped (see cursor.py). Fetches start at the bound,
so after a large drain they have nothing published to step over.

On Citus the relay marks each published row instead (marks.py says why),
and listens on every worker too: an emit runs on its tenant's worker and
notifies there (wakeups.py). Slots, the pipeline and the settling are the
same.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from confluent_kafka import KafkaError, Message, Producer
from opentelemetry.trace import SpanKind
from psycopg.types.json import set_json_loads

from handoff.core import db, kafka, trace_context
from handoff.core import outbox_sql as q
from handoff.core.errors import (
    DatabaseUnavailable,
    EventEncodingError,
    TransientConflict,
    Unavailable,
)
from handoff.core.events import encode, to_record
from handoff.core.outage import Outage
from handoff.core.outbox_sql import IdArray, IdArrayDumper
from handoff.core.retry import RetryPolicy
from handoff.core.settings import HandoffSettings
from handoff.relay import metrics
from handoff.relay.cursor import Cursor, Fetched
from handoff.relay.kafka_io import headers, register_schemas, timing_headers
from handoff.relay.marks import Marks
from handoff.relay.settings import RelaySettings
from handoff.relay.slots import SlotOwner
from handoff.relay.wakeups import WorkerWakeups
from handoff.telemetry import tracing

log = logging.getLogger("handoff.relay")

PURGE_BATCH = 10_000
IN_FLIGHT = 2  # batches handed to the producer thread and not yet resolved
SAVE_EVERY_S = 0.1  # how often a moving bound is written (an idle relay writes at once)
CONFIRM_WAIT_S = 0.02  # idle, fetched rows above the bound: fetch again this soon at most
SEEN_WARN = 100_000  # ids fetched above the bound: beyond this the relay warns once a minute
ONCE_CONFIRM_S = 10.0  # --once: how long an open emit may hold the bound before it exits

Document = tuple[str, str]


@dataclass
class Row:
    id: int
    tenant_id: str
    document_id: str
    version: int
    event_type: str
    payload: dict[str, Any]
    held_behind: int | None  # the earlier parked row of its document, if any
    traceparent: str | None = None  # the emitting unit's trace context (0025_trace)

    @property
    def document(self) -> Document:
        return self.tenant_id, self.document_id


@dataclass
class Batch:
    rows: list[Row]
    fetched: Fetched
    retry: bool  # fetched with nothing in flight: earlier failures are being retried
    fetched_at: float = 0.0  # epoch seconds, for the timing headers (trace_timing)


@dataclass
class Published:
    """What one publish of a batch came to: acknowledged, parked (undeliverable), failed."""

    acked: list[int]
    parked: list[tuple[Row, str]] = field(default_factory=list)
    failed: bool = False
    undelivered: list[int] = field(default_factory=list)  # neither acked nor parked
    tenants: set[str] = field(default_factory=set)  # of the acked rows (Citus routes marks)

    def account(self, rows: list[Row]) -> Published:
        """Notes which of the batch's rows are neither acked nor parked: fetched again."""
        done = set(self.acked).union(row.id for row, _ in self.parked)
        self.undelivered = [row.id for row in rows if row.id not in done]
        return self


class Relay:
    def __init__(self, settings: HandoffSettings, relay: RelaySettings) -> None:
        self.settings = settings
        self.config = relay
        self.stopping = threading.Event()
        self.published = 0
        self._since_poll = 0
        # Values whose delivery failed (failure reports only). A row is known
        # by its value, which holds its event id: no callback object per message.
        self._failed: set[bytes] = set()
        self._fatal: str | None = None
        # An injection point, set in code (a test proves a crash here republishes):
        # called after the broker acked a batch, before the bound passes its rows.
        self.after_ack_hooks: list[Callable[[int], None]] = []
        self.on_citus = False  # learnt from the database at each session's start
        # Outages are logged as such: one line when they begin and one when they end.
        self.kafka_down = Outage(log, "Kafka")
        self.database_down = Outage(log, "the database")

    # -- setup -------------------------------------------------------------------

    def _start_kafka(self) -> None:
        topics = self.config.topics()
        kafka.ensure_topics(self.settings.kafka_bootstrap, topics, self.config.topic_partitions)
        self.schema, self.schema_ids = register_schemas(self.settings.schema_registry_url, topics)
        log.info("schema v%s registered for %s", self.schema.version, ", ".join(topics))
        self.kafka_down.ok()
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        return kafka.producer(
            self.settings.kafka_bootstrap,
            linger_ms=self.config.linger_ms,
            delivery_timeout_s=self.config.delivery_timeout_s,
            error_cb=self._error,
            on_delivery=self._delivered,
            logger=kafka.client_logger("handoff.relay.kafka", self.kafka_down),
        )

    # -- running -------------------------------------------------------------------

    def run(self, *, once: bool = False) -> int:
        """Publish until stopped (or, with ``once``, until nothing is pending). Returns count."""
        attempts = 0
        while True:
            try:
                self._start_kafka()
                break
            except Unavailable as exc:
                attempts += 1
                metrics.FAILURES.labels("setup").inc()
                self.kafka_down.failed(f"Kafka or the registry: {exc}; retrying")
                if self.stopping.wait(self._backoff(attempts)):
                    return self.published
        # Rows are plain acyclic data; the cyclic collector only costs time here.
        gc.freeze()
        gc.set_threshold(100_000, 50, 100)
        attempts = 0
        while not self.stopping.is_set():
            try:
                with (
                    db.connect(self.settings.database_url, autocommit=True) as conn,
                    db.translated(sent=False),
                ):
                    self.database_down.ok()
                    attempts = 0
                    if self._session(conn, once=once):
                        break
            except DatabaseUnavailable as exc:
                attempts += 1
                metrics.FAILURES.labels("database").inc()
                metrics.SLOTS_OWNED.set(0)
                self.database_down.failed(f"{exc}; reconnecting")
                self.stopping.wait(self._backoff(attempts))
            except TransientConflict as exc:
                # A statement met a concurrent one: on Citus, a shard moved or split
                # under a fetch or a mark (seen under handoff chaos --kinds move). A
                # new session starts from what is marked or bounded; rows in flight
                # go out again (duplicates, as after a crash).
                metrics.FAILURES.labels("database").inc()
                metrics.SLOTS_OWNED.set(0)
                log.warning("%s; starting a new session", exc)
                self.stopping.wait(self._backoff(1))
        self.producer.flush(self.config.delivery_timeout_s)
        return self.published

    def _session(self, conn: psycopg.Connection[Any], *, once: bool) -> bool:
        """Run the pipeline on one database session; True when --once is done."""
        set_json_loads(orjson.loads, conn)  # payload decoding is on the hot path
        conn.adapters.register_dumper(IdArray, IdArrayDumper)
        self.on_citus = db.on_citus(conn)
        conn.execute(q.CITUS_SESSION_SETUP if self.on_citus else q.SESSION_SETUP)
        conn.execute(q.LISTEN)
        batches: queue.Queue[Batch | None] = queue.Queue()
        results: queue.Queue[Published] = queue.Queue()
        result: dict[str, Any] = {}
        database_side = threading.Thread(
            target=self._database_side,
            args=(conn, once, batches, results, result),
            name="relay-db",
            daemon=True,
        )
        database_side.start()
        failed_docs: set[Document] = set()
        while (batch := batches.get()) is not None:
            if batch.retry:
                failed_docs.clear()
            results.put(self._publish(batch, failed_docs).account(batch.rows))
        database_side.join()
        if "error" in result:
            raise result["error"]
        return bool(result.get("done"))

    # -- the database thread ------------------------------------------------------------

    def _database_side(
        self,
        conn: psycopg.Connection[Any],
        once: bool,
        batches: queue.Queue[Batch | None],
        results: queue.Queue[Published],
        result: dict[str, Any],
    ) -> None:
        try:
            result["done"] = self._feed(conn, once, batches, results)
        except BaseException as exc:  # handed to the producer thread, which re-raises
            result["error"] = exc
        finally:
            batches.put(None)

    def _feed(
        self,
        conn: psycopg.Connection[Any],
        once: bool,
        batches: queue.Queue[Batch | None],
        results: queue.Queue[Published],
    ) -> bool:
        slots = SlotOwner(conn)
        cursor: Cursor | Marks = Marks(set()) if self.on_citus else Cursor({})
        wakeups = WorkerWakeups(self.settings.database_url) if self.on_citus else None
        try:
            return self._pipeline(conn, once, batches, results, slots, cursor, wakeups)
        finally:
            if wakeups is not None:
                wakeups.close()

    def _pipeline(
        self,
        conn: psycopg.Connection[Any],
        once: bool,
        batches: queue.Queue[Batch | None],
        results: queue.Queue[Published],
        slots: SlotOwner,
        cursor: Cursor | Marks,
        wakeups: WorkerWakeups | None,
    ) -> bool:
        in_flight: list[Fetched] = []  # batches awaiting acks, oldest first
        full = False  # the last fetch filled its batch: a backlog, keep the pipeline full
        failures = 0
        next_rebalance = next_metrics = next_save = next_warn = 0.0
        next_purge = time.monotonic() + self.config.purge_interval_s
        idle_since: float | None = None  # --once: all published, the bound not yet past it
        while not self.stopping.is_set():
            while in_flight and not results.empty():
                failures = self._settle(conn, results.get(), cursor, in_flight.pop(0), failures)
            now = time.monotonic()
            if not in_flight:
                # Slots change hands only with nothing in flight.
                if now >= next_rebalance:
                    self._save(conn, cursor)
                    before = set(slots.owned)
                    slots.rebalance(take_all=once)
                    if slots.owned != before:
                        cursor = self._cursor(conn, slots)
                    if wakeups is not None:
                        wakeups.refresh(conn)
                    metrics.SLOTS_OWNED.set(len(slots.owned))
                    next_rebalance = now + self.config.rebalance_interval_s
                if failures:
                    self.stopping.wait(self._backoff(failures))
            if now >= next_metrics:
                self._measure(conn)
                next_metrics = now + self.config.metrics_interval_s
            if now >= next_purge:
                self._purge(conn)
                next_purge = now + self.config.purge_interval_s
            if now >= next_save:
                self._save(conn, cursor)
                next_save = now + SAVE_EVERY_S
                if cursor.seen_count > SEEN_WARN and now >= next_warn:
                    # Each fetch sends these ids: the relay slows as they grow.
                    log.warning(
                        "an open transaction holds the outbox bound at %s; about %s published "
                        "ids above it are excluded from every fetch until it ends",
                        cursor.value, cursor.seen_count,
                    )  # fmt: skip
                    next_warn = now + 60
            # After a failure, drain first: the retry must come as a batch
            # fetched with nothing in flight, or a busy relay would never retry.
            # A second batch is fetched while one is in flight only behind a
            # full one (a backlog): after a short one, the rows that arrive
            # during its ack are fetched when it is settled, as soon as a fetch
            # made at once would have left them; that fetch mostly found
            # nothing (pg_stat_statements in a hop run at 250 emits/s: 4,303
            # fetches for 2,902 batches).
            if not in_flight or (len(in_flight) < IN_FLIGHT and full and not failures):
                rows = self._fetch_into(conn, cursor, batches, in_flight)
                full = len(rows) >= self.config.batch_size
                if rows:
                    idle_since = None
                    continue
            if in_flight:
                failures = self._settle(conn, results.get(), cursor, in_flight.pop(0), failures)
                continue
            if not cursor.unconfirmed:
                self._save(conn, cursor)  # going idle: the bound as far as it goes
                if once:
                    return True
                idle_since = None
            elif once:
                # Everything visible is published; an emit left open holds the
                # bound below it (a transaction idle in the middle): do not wait
                # for it for ever, the next relay publishes those rows again.
                idle_since = idle_since or now
                if now - idle_since >= ONCE_CONFIRM_S:
                    self._save(conn, cursor)
                    log.warning(
                        "an open transaction holds the outbox bound at %s; exiting "
                        "(rows above it go out again with the next relay)",
                        cursor.value,
                    )
                    return True
            # Idle: ask emits to notify, look once more (a row committed just
            # before the flag was set gets no NOTIFY), then wait. Not long while
            # fetched rows lie above the bound: the next fetches prove it past them.
            conn.execute(q.SET_WAITING)
            if wakeups is not None:
                wakeups.arm()
            if self._fetch_into(conn, cursor, batches, in_flight):
                continue
            if cursor.unconfirmed:
                wait = CONFIRM_WAIT_S
            else:
                # That look may have been the proof: save the bound before a long
                # wait, or the rows it passed count as pending (the backlog, the
                # audit) until the wait ends (a test with a minute's poll saw so).
                self._save(conn, cursor)
                # Not past the next rebalance either: slots another relay gave up
                # are nobody's until then, and their rows wait for it (a notify
                # that comes before it finds the slots not yet taken).
                wait = min(self.config.poll_interval_s, next_rebalance - now)
            if wakeups is not None:
                wakeups.wait(conn, wait)
            else:
                for _ in conn.notifies(timeout=wait, stop_after=1):
                    pass
        self._save(conn, cursor)
        return False

    def _cursor(self, conn: psycopg.Connection[Any], slots: SlotOwner) -> Cursor | Marks:
        """A cursor for newly owned slots, from the bounds their last owners left.

        Rows fetched above the old bound and not yet proven are fetched again
        (duplicates, as after a crash): slots change hands rarely.
        """
        if self.on_citus:
            return Marks(slots.owned)
        found = conn.execute(q.BOUNDS, {"slots": sorted(slots.owned)}).fetchall()
        return Cursor({int(slot): int(upto) for slot, upto in found})

    def _save(self, conn: psycopg.Connection[Any], cursor: Cursor | Marks) -> None:
        if cursor.value > cursor.saved and cursor.slots:
            conn.execute(q.ADVANCE, {"upto": cursor.value, "slots": cursor.slots})
            cursor.saved = cursor.value

    def _settle(
        self,
        conn: psycopg.Connection[Any],
        done: Published,
        cursor: Cursor | Marks,
        fetched: Fetched,
        failures: int,
    ) -> int:
        for row, reason in done.parked:
            conn.execute(q.PARK, {"tenant": row.tenant_id, "id": row.id, "reason": reason[:1000]})
        if done.acked:
            if isinstance(cursor, Marks):
                conn.execute(
                    q.CITUS_MARK,
                    {"tenants": sorted(done.tenants), "ids": IdArray.of(done.acked)},
                )
            self.published += len(done.acked)
            metrics.PUBLISHED.inc(len(done.acked))
        cursor.settled(fetched, done.undelivered)
        return failures + 1 if done.failed else 0

    def _fetch_into(
        self,
        conn: psycopg.Connection[Any],
        cursor: Cursor | Marks,
        batches: queue.Queue[Batch | None],
        in_flight: list[Fetched],
    ) -> list[Row]:
        """Fetches the next pending rows of owned slots and hands them to the producer
        thread as a batch (a retry when nothing else is in flight); returns them."""
        if not cursor.slots:
            return []
        if isinstance(cursor, Marks):
            rows = [
                Row(*r)
                for r in conn.execute(
                    q.CITUS_FETCH,
                    {
                        "slots": cursor.owned(),
                        "seen": cursor.seen(),
                        "limit": self.config.batch_size,
                    },
                )
            ]
            return self._hand_over(rows, cursor.fetched([r.id for r in rows]), batches, in_flight)
        found = conn.execute(
            q.FETCH_PENDING,
            {
                "after": cursor.value,
                "bounds": cursor.bounds(),
                "seen": cursor.seen(),
                "limit": self.config.batch_size,
                "lockers": cursor.wants_lockers,
            },
        ).fetchall()
        xmin, next_xid, last_id, lockers = found[0][:4]
        rows = [Row(*r[4:]) for r in found if r[4] is not None]
        full = len(rows) >= self.config.batch_size
        ids = [row.id for row in rows]
        fetched = cursor.fetched(xmin, next_xid, last_id, ids, full=full, lockers=lockers)
        return self._hand_over(rows, fetched, batches, in_flight)

    @staticmethod
    def _hand_over(
        rows: list[Row],
        fetched: Fetched | None,
        batches: queue.Queue[Batch | None],
        in_flight: list[Fetched],
    ) -> list[Row]:
        if fetched is not None:
            batches.put(Batch(rows, fetched, retry=not in_flight, fetched_at=time.time()))
            in_flight.append(fetched)
        return rows

    # -- the producer thread ------------------------------------------------------------

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        # Called for failures only (delivery.report.only.error).
        if err is not None:
            value = msg.value()
            if isinstance(value, bytes):
                self._failed.add(value)
            if kafka.is_outage(err):
                self.kafka_down.failed(f"delivery failed: {err}")
            else:
                log.warning("delivery of %r failed: %s", msg.key(), err)

    def _error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = str(err)
        if kafka.is_outage(err) and not err.fatal():
            self.kafka_down.failed(err)
        else:
            log.warning("kafka: %s", err)

    def _publish(self, batch: Batch, failed_docs: set[Document]) -> Published:
        """Produce a batch and wait for every ack; say which rows are settled.

        ``failed_docs`` carries documents whose delivery failed into later
        batches: their rows wait for the rescan that retries the failure, so
        they never overtake it.
        """
        rows = batch.rows
        timing = timing_headers(batch.fetched_at) if self.config.trace_timing else []
        self._failed.clear()
        done = Published(acked=[])
        parked: dict[Document, int] = {}  # documents parked in this batch: the row's id
        sent: list[tuple[Row, bytes]] = []
        for row in rows:
            if row.document in failed_docs:
                continue
            behind = row.held_behind or parked.get(row.document)
            if behind:
                # Behind a parked row of its document: parked too, in its order,
                # so that the slot's bound can pass it (handoff outbox unpark).
                done.parked.append((row, f"held behind parked outbox row {behind}"))
                parked.setdefault(row.document, behind)
                continue
            owner = row.payload.get("owner")
            topic = self.config.topic_for(row.event_type, owner)
            try:
                value = encode(
                    self.schema, self.schema_ids[topic], to_record(row.payload, self.schema.version)
                )
            except EventEncodingError as exc:
                done.parked.append((row, str(exc)))
                metrics.FAILURES.labels("encode").inc()
                log.error(
                    "parking outbox row %s (%s/%s): %s", row.id, *row.document, exc,
                    extra={"tenant": row.tenant_id, "documentId": row.document_id,
                           "eventId": row.payload.get("eventId"), "outboxId": row.id},
                )  # fmt: skip
                parked[row.document] = row.id
                continue
            with tracing.span(
                f"publish {topic}",
                parent=row.traceparent,
                kind=SpanKind.PRODUCER,
                attributes={"messaging.system": "kafka", "messaging.destination.name": topic,
                            "handoff.document": row.document_id, "handoff.version": row.version},
            ) if row.traceparent else nullcontext() as span:  # fmt: skip
                # The consumer continues the publish span (emit → publish → consume);
                # a relay with tracing off passes the emit's context on unchanged.
                carried = (
                    trace_context.traceparent_of(span) if span is not None else row.traceparent
                )
                self._produce(
                    topic,
                    value,
                    f"{row.tenant_id}/{row.document_id}".encode(),
                    headers(row.payload, carried) + timing,
                )
            sent.append((row, value))
        unsettled = self.producer.flush(self.config.delivery_timeout_s + 5)
        if sent and not unsettled and len(self._failed) < len(sent):
            self.kafka_down.ok()  # the broker acked: whatever was down is back
        if unsettled or self._fatal:
            # No ack is known for certain: settle nothing, start afresh, resend.
            why = f"producer unsettled ({unsettled} left, fatal: {self._fatal}); recreating"
            if self.kafka_down.failing and not self._fatal:
                self.kafka_down.failed(why)  # the outage's consequence, not news
            else:
                log.warning("%s", why)
            metrics.FAILURES.labels("delivery").inc(len(sent))
            self._replace_producer()
            failed_docs.update(row.document for row, _ in sent)
            done.failed = True
            return done
        if len(sent) > len(self._failed):
            for hook in self.after_ack_hooks:  # acked, the bound not yet past them
                hook(len(sent))
        # Settle, per document, only the acked prefix: a later row acked after
        # an earlier one failed is sent again with it, in order.
        for row, value in sent:
            if row.document in failed_docs:
                continue
            if value in self._failed:
                failed_docs.add(row.document)
                done.failed = True
            else:
                done.acked.append(row.id)
                done.tenants.add(row.tenant_id)
        if done.failed:
            metrics.FAILURES.labels("delivery").inc(len(self._failed))
        return done

    def _produce(self, topic: str, value: bytes, key: bytes, hdrs: list[Any]) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=hdrs)
                break
            except BufferError:  # local queue full: let deliveries drain it
                self.producer.poll(0.05)
        self._since_poll += 1
        if self._since_poll >= 1000:  # serve callbacks now and then, not per message
            self.producer.poll(0)
            self._since_poll = 0

    def _replace_producer(self) -> None:
        self.producer.purge()
        self.producer.flush(1)
        self._fatal = None
        self.producer = self._new_producer()

    # -- housekeeping (database thread) --------------------------------------------------

    def _measure(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(q.BACKLOG).fetchone()
        if row:
            metrics.BACKLOG.set(row[0])
            metrics.OLDEST_AGE.set(float(row[1] or 0))
            metrics.PARKED.set(row[2])

    def _purge(self, conn: psycopg.Connection[Any]) -> None:
        seconds = self.config.retention_hours * 3600
        while True:
            purge = q.CITUS_PURGE if self.on_citus else q.PURGE
            deleted = conn.execute(purge, {"seconds": seconds, "limit": PURGE_BATCH}).rowcount
            metrics.PURGED.inc(deleted)
            if deleted < PURGE_BATCH or self.stopping.is_set():
                break

    def _backoff(self, failures: int) -> float:
        # The one policy of core/retry.py; Kafka outages are waited out forever.
        return RetryPolicy(base_s=0.4, max_s=self.config.max_backoff_s).delay(failures)

    def stop(self) -> None:
        self.stopping.set()
