"""The consumer process: read Kafka, filter, decode, run units, then commit offsets.

    Runtime(app, settings, config).run()      # what `handoff consume module:app` does

Order of a poll: messages -> header filter -> decode -> one unit of work
(units.py) -> database commit -> Kafka offset commit. Offsets never run
ahead of the database, so a kill -9 at any point redelivers at most the
uncommitted batch, which the guard absorbs. Batched in one lane, the next
batch is decoded on a thread while this one's unit runs (Runtime._batches);
Kafka and the database are only touched from the main thread. Between polls
the sweeper takes back parked events and quarantine retries; lag and
pending work are measured for /metrics.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import psycopg
from confluent_kafka import (
    OFFSET_INVALID,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    Message,
    TopicPartition,
)
from confluent_kafka import Consumer as KafkaConsumer
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from handoff.consumers import metrics
from handoff.consumers.app import Consumer
from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.event import Position, built
from handoff.consumers.failures import Category
from handoff.consumers.queued import QueuedLane
from handoff.consumers.settings import ConsumerSettings
from handoff.consumers.units import Item, Processor, sweep
from handoff.consumers.verdicts import Verdict
from handoff.core import db, kafka
from handoff.core import guards_sql as guards
from handoff.core.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    HandlerMissing,
    LoginRefused,
    MalformedEvent,
    Unavailable,
)
from handoff.core.outage import Outage
from handoff.core.retry import RetryPolicy
from handoff.core.settings import HandoffSettings
from handoff.telemetry import tracing

log = logging.getLogger("handoff.consumers")

# Batches a poll takes when batched (not fewer than the prefetch): with one,
# there would be nothing to decode while a unit runs (Runtime._batches).
# Only once units are measured to be quick: a poll's work must stay well
# inside Kafka's max.poll.interval.ms (300 s), and four batches of a slow
# handler would not; until then, and whenever they are slow, a poll takes one.
AHEAD = 4
AHEAD_BUDGET_S = 30.0


def _headers(msg: Message) -> dict[str, str]:
    found: dict[str, str] = {}
    for header in msg.headers() or []:
        name, value = header[0], header[1]
        if isinstance(value, bytes):
            found[name] = value.decode("utf-8", "replace")
        elif isinstance(value, str):
            found[name] = value
    return found


def screen(
    msg: Message, app: Consumer, tenant: str, received_at: float | None = None
) -> Position | None:
    """The header filter: where the message was read, or None (counted) if not for ``app``."""
    headers = _headers(msg)
    kind, stamp = msg.timestamp()
    position = built(
        Position,
        topic=msg.topic() or "",
        partition=msg.partition() or 0,
        offset=msg.offset() or 0,
        key=msg.key(),
        value=msg.value() or b"",
        headers=headers,
        timestamp_ms=stamp if kind != TIMESTAMP_NOT_AVAILABLE else None,
        received_at=received_at,
    )
    event_type = headers.get("eventType")
    if event_type is not None and "tenant" in headers:
        owner = headers.get("owner") or None
        if not app.wants(event_type, owner, headers["tenant"], tenant):
            metrics.EVENTS.labels(app.name, "filtered").inc()
            return None
    return position


def decoded(
    position: Position,
    app: Consumer,
    tenant: str,
    decoder: Decoder,
    wait: Callable[[int], bool],
) -> Item | None:
    """A screened message decoded; None for one whose envelope says it is not for ``app``.

    ``wait(failures)`` waits out a registry outage and answers True to give up.
    """
    failures = 0
    while True:
        try:
            event = decoder.decode(position.value, position)
            break
        except MalformedEvent as exc:
            return Item(position, malformed=exc)
        except Unavailable as exc:  # the registry, not the message: wait for it
            failures += 1
            log.warning("%s; retrying", exc)
            if wait(failures):
                raise
    # Without headers (another producer), the filter runs on the envelope.
    if not app.wants(event.event_type, event.owner, event.tenant_id, tenant):
        metrics.EVENTS.labels(app.name, "filtered").inc()
        return None
    return Item(position, event=event)


def message_item(
    msg: Message,
    app: Consumer,
    tenant: str,
    decoder: Decoder,
    wait: Callable[[int], bool],
    received_at: float | None = None,
) -> Item | None:
    """The header filter, then decoding; None for a message not meant for ``app``."""
    position = screen(msg, app, tenant, received_at)
    return None if position is None else decoded(position, app, tenant, decoder, wait)


class Runtime:
    def __init__(
        self,
        app: Consumer,
        settings: HandoffSettings,
        config: ConsumerSettings | None = None,
    ) -> None:
        if not app.handlers:
            raise HandlerMissing(f"consumer {app.name} has no handlers; add one first")
        self.app, self.settings = app, settings
        self.config = config or ConsumerSettings()
        if app.batch_size is not None and "batch_size" not in self.config.model_fields_set:
            self.config = self.config.model_copy(update={"batch_size": app.batch_size})
        self.stopping = threading.Event()
        self.tenant = ""
        self._polled_at: float | None = None
        self._outage = RetryPolicy(base_s=0.2, max_s=5.0)
        # An outage is logged as one: its start, reminders, its end (core/outage.py).
        self.kafka_down = Outage(log, "Kafka")
        self.database_down = Outage(log, "the database")
        self._conns: list[psycopg.Connection[Any]] = []  # one a lane; the first is lane 0's
        self._reads: psycopg.Connection[Any] | None = None
        self._lanes: list[Processor] = []
        self._pool: ThreadPoolExecutor | None = None  # the lanes
        self._decoding: ThreadPoolExecutor | None = None  # batches decoded ahead (_batches)
        self._event_s = math.inf  # a batched unit's seconds per event, smoothed (_poll)
        self._processed = 0

    # -- connections -----------------------------------------------------------------

    def _conninfo(self) -> str:
        cred = self.app.credential
        return make_conninfo(self.settings.database_url, user=cred.role, password=cred.secret)

    def _connect(self) -> tuple[list[psycopg.Connection[Any]], psycopg.Connection[Any]]:
        """A connection for each lane's units, and one for reads and marks."""
        failures = 0
        while True:
            conns: list[psycopg.Connection[Any]] = []
            try:
                # Autocommit: units send BEGIN and COMMIT themselves (core/tx.py).
                for _ in range(self.config.concurrency):
                    conns.append(db.connect(self._conninfo(), autocommit=True, connect_timeout=10))
                reads = db.connect(self._conninfo(), autocommit=True, connect_timeout=10)
                break
            except (DatabaseUnavailable, LoginRefused) as exc:
                for conn in conns:
                    conn.close()
                if isinstance(exc, LoginRefused):
                    raise ConfigurationError(
                        f"PostgreSQL refused the credential of {self.app.name}: check "
                        f"{self.app.credential_env} (handoff service rotate prints a new one)"
                    ) from exc
                failures += 1
                self.database_down.failed(f"{exc}; retrying")
                if self.stopping.wait(self._outage.delay(failures)):
                    raise DatabaseUnavailable("stopped while waiting for the database") from exc
        row = reads.execute(guards.WHOAMI).fetchone()
        assert row is not None
        tenant, name = row
        if name != self.app.name:
            raise ConfigurationError(
                f"the credential belongs to service {name}, not to consumer {self.app.name}"
            )
        self.tenant = tenant
        return conns, reads

    def _close(self) -> None:
        for conn in [*self._conns, self._reads]:
            if conn is not None and not conn.closed:
                conn.close()

    def _reconnect(self) -> None:
        self._close()
        self._conns, self._reads = self._connect()
        self._lanes = [
            Processor(self.app, conn, self.config, tenant=self.tenant) for conn in self._conns
        ]
        self.processor = self._lanes[0]

    # -- Kafka ------------------------------------------------------------------------

    def _kafka(self) -> KafkaConsumer:
        consumer = kafka.group_consumer(
            self.settings.kafka_bootstrap,
            self.config.group or kafka.group_of(self.tenant, self.app.name),
            client_id=f"handoff-{self.app.name}-{os.getpid()}",
            session_timeout_s=self.config.session_timeout_s,
            commit_interval_s=self.config.commit_interval_s,
            instance_id=self.config.instance_id,
            logger=kafka.client_logger("handoff.consumers.kafka", self.kafka_down),
        )
        consumer.subscribe(self.config.topics)
        return consumer

    def _decode(self, screened: list[Position], decoder: Decoder) -> list[Item]:
        """Screened messages decoded, those the envelope filter keeps."""

        def wait(failures: int) -> bool:
            return self.stopping.wait(self._outage.delay(failures))

        items = (decoded(p, self.app, self.tenant, decoder, wait) for p in screened)
        return [item for item in items if item is not None]

    # -- the loop ---------------------------------------------------------------------

    def _guarded(self, work: Callable[[], None]) -> bool:
        """Run ``work`` until it gets through a database outage; False if stopped."""
        failures = 0
        while not self.stopping.is_set():
            try:
                with db.translated(sent=False):  # the marks and sweeps are plain statements
                    work()
                self.database_down.ok()
                return True
            except DatabaseUnavailable as exc:
                failures += 1
                self.database_down.failed(f"{exc}; reconnecting")
                if self.stopping.wait(self._outage.delay(failures)):
                    return False
                try:
                    self._reconnect()
                except DatabaseUnavailable:
                    return False
        return False

    def run(self, *, idle_exit_s: float | None = None) -> int:
        """Consume until stopped (or idle for ``idle_exit_s``). Returns messages processed."""
        metrics.prepare(
            self.app.name,
            sorted({v.outcome for v in Verdict} | {"filtered", "unmatched"}),
            [c.value for c in Category],
        )
        self._reconnect()
        decoder = Decoder(
            self.settings.schema_registry_url, reader_schema(self.config.reader_schema_version)
        )
        consumer = self._kafka()
        log.info(
            "consumer %s (tenant %s) reading %s as group %s, batch %d, reader schema v%d",
            self.app.name,
            self.tenant,
            ",".join(self.config.topics),
            self.config.group or f"handoff.{self.tenant}.{self.app.name}",
            self.config.batch_size,
            decoder.reader_version,
        )
        # What start-up made (modules, the app, schemas, clients) lives as long as
        # the process: out of the collector's way, so a full collection between
        # two polls scans only what the loop made (the tracker does the same).
        gc.freeze()
        if self.config.concurrency > 1:
            self._pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="lane")
        elif self.config.batch_size > 1:
            self._decoding = ThreadPoolExecutor(1, thread_name_prefix="decode")
        next_sweep = next_measure = 0.0
        last_message = time.monotonic()
        rate_mark, rate_count = time.monotonic(), 0
        try:
            while not self.stopping.is_set():
                msgs = self._poll(consumer)
                usable = [m for m in msgs if not self._kafka_error(m)]
                if usable:
                    self.kafka_down.ok()
                    if not self._handle(consumer, usable, decoder):
                        break  # stopped mid-outage: the rest stays uncommitted
                    # Idle from the end of the work, not from the poll: a poll whose
                    # handling outlasts --idle-exit is busy, not idle, and the topic
                    # may hold more.
                    last_message = time.monotonic()
                now = time.monotonic()
                if now >= next_sweep:
                    self._guarded(lambda: self._sweep(decoder))
                    next_sweep = now + self.config.sweep_interval_s
                if now >= next_measure:
                    metrics.RATE.labels(self.app.name).set(
                        (self._processed - rate_count) / max(now - rate_mark, 1e-9)
                    )
                    rate_mark, rate_count = now, self._processed
                    self._guarded(lambda: self._measure(consumer))
                    next_measure = now + self.config.metrics_interval_s
                if idle_exit_s is not None and now - last_message > idle_exit_s:
                    break
        finally:
            consumer.close()  # commits the stored offsets
            if self._decoding is not None:
                self._decoding.shutdown()
            decoder.close()
            if self._pool is not None:
                self._pool.shutdown()
            self._close()
        return self._processed

    def _handle(self, consumer: KafkaConsumer, msgs: list[Message], decoder: Decoder) -> bool:
        """A poll's messages, batch by batch: each batch one unit, then its offsets stored.

        The deliveries of the whole poll are marked once, before the first
        unit: a mark is a commit of its own, which at batch 1 would double
        the commits. False if stopped while the database was away.
        """
        size = self.config.batch_size
        chunks = [msgs[i : i + size] for i in range(0, len(msgs), size)]
        screened = [[p for m in chunk
                     if (p := screen(m, self.app, self.tenant, self._polled_at)) is not None]
                    for chunk in chunks]  # fmt: skip
        positions = [p for chunk in screened for p in chunk]
        marked: list[int] = []
        mark = partial(self._receive, "batch", positions)
        if positions and not self._guarded(lambda: marked.append(mark())):
            return False
        if marked and marked[0] > 1:
            # A process stopped while on these events: which one stopped it is
            # found out one at a time, each counted (_one_at_a_time).
            every = self._decode(positions, decoder)
            if not self._guarded(partial(self._one_at_a_time, every)):
                return False
            self._done(consumer, msgs, events=0)
            return True
        if self._pool is not None:
            every = self._decode(positions, decoder)
            if not self._guarded(partial(self._run_lanes, every)):
                return False
            if not self.stopping.is_set():  # else a lane may have stopped short: redelivered
                self._done(consumer, msgs, events=len(every))
            return True
        if self._queueing():  # one lane (lanes were handled above)
            return self._queued(consumer, chunks, screened, decoder)
        return self._batches(consumer, chunks, screened, decoder)

    def _queueing(self) -> bool:
        """Units sent ahead in each lane (consumers/queued.py): not where a unit may start
        a recorded trace (a ratio above 0), whose span and rows' traceparent are made as
        it is sent alone. With ratio 0 a unit whose events came traced goes alone
        (``Processor.queued_unit``), the others go ahead."""
        return (
            self.config.queue_ahead > 0 and self.processor.queueable and not tracing.starts_traces()
        )

    def _queued(
        self,
        consumer: KafkaConsumer,
        chunks: list[list[Message]],
        screened: list[list[Position]],
        decoder: Decoder,
    ) -> bool:
        """Each batch one unit, sent while the one before it is in the database; each
        batch's offsets stored once it and those before it are through. Decoding, the
        handlers and binding the next unit happen while the database runs this one."""
        through = 0  # the chunks done: their offsets stored

        def entries() -> Iterator[tuple[int, list[Item]]]:
            # From the first chunk not done: after an outage the rest is taken again.
            for n in range(through, len(chunks)):
                if self.stopping.is_set():
                    return  # the rest is redelivered to whoever takes the partition
                items = self._decode(screened[n], decoder)
                events[n] = len(items)
                yield n, items

        def done(n: int) -> None:
            nonlocal through
            self._done(consumer, chunks[n], events=events[n])
            through = n + 1

        events = [0] * len(chunks)
        started = time.monotonic()
        # self.processor is looked up on each try: a reconnect replaces it.
        if not self._guarded(
            lambda: QueuedLane[int](self.processor, self.config.queue_ahead).run(entries(), done)
        ):
            return False
        if sum(events):
            self._unit_took(time.monotonic() - started, sum(events))
        return True

    def _batches(
        self,
        consumer: KafkaConsumer,
        chunks: list[list[Message]],
        screened: list[list[Position]],
        decoder: Decoder,
    ) -> bool:
        """Each batch one unit, in order; the next batch decoded while this one's unit runs.

        Why a thread: decoding is Python, about 60 us an event, and a batched
        unit is mostly the database's time, in which psycopg lets go of the
        interpreter lock. Done one after the other, the two left each core
        idle half the time (a batched run used 1.2 of the machine's 2 cores);
        overlapped, the next batch is ready when the unit commits. Only
        decoding moves: Kafka and the database stay on this thread, so polls,
        rebalances and offsets happen as before.
        """
        ahead: Future[list[Item]] | None = None
        try:
            for n, chunk in enumerate(chunks):
                if self.stopping.is_set():
                    return True  # the rest is redelivered to whoever takes the partition
                items = ahead.result() if ahead else self._decode(screened[n], decoder)
                ahead = None
                if self._decoding is not None and n + 1 < len(chunks) and screened[n + 1]:
                    ahead = self._decoding.submit(self._decode, screened[n + 1], decoder)
                if items:
                    started = time.monotonic()
                    # self.processor is looked up on each try: a reconnect replaces it.
                    if not self._guarded(partial(self._run_batch, items)):
                        return False
                    self._unit_took(time.monotonic() - started, len(items))
                self._done(consumer, chunk, events=len(items))
        finally:
            if ahead is not None:
                ahead.exception()  # the decoder is not left in use when the process closes it
        return True

    def _unit_took(self, seconds: float, events: int) -> None:
        per_event = seconds / events
        if math.isinf(self._event_s):
            self._event_s = per_event
        else:
            self._event_s += 0.2 * (per_event - self._event_s)

    def _done(self, consumer: KafkaConsumer, msgs: list[Message], *, events: int) -> None:
        """``msgs`` are through (the units of their ``events`` committed): offsets stored."""
        if events:
            for hook in self.app.after_commit_hooks:
                hook(events)
        self._commit(consumer, msgs)
        self._processed += len(msgs)

    def _poll(self, consumer: KafkaConsumer) -> list[Message]:
        """What is buffered, up to the prefetch; else wait for the first message, then top up.

        ``consume(n, timeout)`` alone waits until n messages or the timeout:
        at a modest rate every batch would wait out the timeout, which is
        latency no one asked for. Batches still fill up under load.
        """
        size = max(self.config.batch_size, self.config.prefetch)
        ahead = self.config.batch_size * AHEAD  # batches to decode while the one before runs
        if self._batched_lane() and self._event_s * ahead <= AHEAD_BUDGET_S:
            size = max(size, ahead)
        msgs = consumer.consume(size, 0)
        if not msgs:
            msgs = consumer.consume(1, self.config.poll_timeout_s)
            if msgs and size > 1:
                msgs += consumer.consume(size - 1, 0)
        if msgs:
            self._polled_at = time.time()  # each message's received_at (event.Position)
        return msgs

    def _batched_lane(self) -> bool:
        """Batches in one lane: a poll may take several, one running while the next is
        decoded (``_batches``) or made and sent ahead (``_queued``)."""
        return self.config.batch_size > 1 and self._pool is None

    def _receive(self, kind: str, positions: list[Position], inherit: int = 0) -> int:
        """Mark the offset ranges about to be processed; the most deliveries among them.

        ``inherit``: stops of the batch an event was in that count as its own.
        """
        assert self._reads is not None
        ranges: dict[tuple[str, int], list[int]] = {}
        for p in positions:
            span = ranges.setdefault((p.topic, p.partition), [p.offset, p.offset])
            span[0], span[1] = min(span[0], p.offset), max(span[1], p.offset)
        marks = [{"topic": t, "partition": n, "first": a, "last": b, "inherit": inherit}
                 for (t, n), (a, b) in ranges.items()]  # fmt: skip
        row = self._reads.execute(guards.RECEIVE, {"kind": kind, "marks": Jsonb(marks)}).fetchone()
        return int(row[0]) if row else 1

    def _run_batch(self, items: list[Item]) -> None:
        self.processor.run_batch(items)

    def _run_lanes(self, items: list[Item]) -> None:
        """``items`` over the lanes by document, each lane's batch by batch, all at once.

        A document's events share a lane and keep their order in it. After an
        outage the whole poll is taken again: what a lane had committed is a
        duplicate to the guard, no second effect.
        """
        assert self._pool is not None
        lanes: list[list[Item]] = [[] for _ in self._lanes]
        for item in items:
            document = item.event.document_id if item.event is not None else ""
            lanes[zlib.crc32(document.encode()) % len(lanes)].append(item)
        size = self.config.batch_size

        def run(processor: Processor, mine: list[Item]) -> None:
            def units() -> Iterator[tuple[int, list[Item]]]:
                for start in range(0, len(mine), size):
                    if self.stopping.is_set():
                        return
                    yield start, mine[start : start + size]

            if self._queueing():
                QueuedLane[int](processor, self.config.queue_ahead).run(units(), lambda _: None)
                return
            for _, batch in units():
                processor.run_batch(batch)

        futures = [self._pool.submit(run, processor, mine)
                   for processor, mine in zip(self._lanes, lanes, strict=True) if mine]  # fmt: skip
        errors = [error for future in futures if (error := future.exception()) is not None]
        if errors:  # every lane has stopped by now: the first error decides
            raise errors[0]

    def _one_at_a_time(self, items: list[Item]) -> None:
        """A process stopped (killed, out of memory, crashed) while on these events: one
        event at a time, each counted, so the one that stops it again is the one blamed.

        Each event's count starts with the stop of the batch it was in (the
        database knows which: consumer_receive in handoff/sql/consumers.sql), so a handler
        that kills its process runs max_deliveries times in all, once in its
        batch and then alone. With max_deliveries 1 no event is blamed for its
        batch: it is first given one run alone.
        """
        limit = self.config.max_deliveries
        inherit = 1 if limit > 1 else 0
        log.warning("%s: %d event(s) delivered again before they were got through (a process "
                    "stopped, or Kafka redelivered them); one event at a time", self.app.name,
                    len(items))  # fmt: skip
        for item in items:
            stops = self._receive("event", [item.position], inherit) - 1
            if stops >= limit:
                self.processor.quarantine(
                    item,
                    Category.HANDLER_ERROR,
                    f"consumer processes stopped {stops} time(s) while handling this event "
                    "(killed, out of memory or crashed); it is not handed to its handler again",
                    stops,
                )
            else:
                self.processor.run_one(item)
                self._receive("done", [item.position])  # got through: its count starts again

    def _kafka_error(self, msg: Message) -> bool:
        error = msg.error()
        if error is None:
            return False
        if error.fatal() or error.code() == KafkaError._FATAL:
            # A consumer's only fatal error: another member took its static id
            # (group.instance.id). The client is dead from here on; a process
            # that went on polling it would look alive and do nothing. (It comes
            # as a message whose code is _FATAL, with fatal() False: seen.)
            same = f" ({self.config.instance_id!r})" if self.config.instance_id else ""
            raise ConfigurationError(
                f"Kafka: {error.str()}; another consumer of the group runs with this "
                f"process's instance id{same}: give each process its own (--instance-id, "
                "HANDOFF_CONSUMER_INSTANCE_ID)"
            )
        if kafka.is_outage(error):
            self.kafka_down.failed(error)
        elif error.code() != KafkaError._PARTITION_EOF:
            log.warning("Kafka: %s", error)
        return True

    def _commit(self, consumer: KafkaConsumer, msgs: list[Message]) -> None:
        """Store the offsets after the database commit; a lost one means a redelivery."""
        ends: dict[tuple[str, int], int] = {}
        for msg in msgs:
            key = (msg.topic() or "", msg.partition() or 0)
            ends[key] = max(ends.get(key, -1), (msg.offset() or 0) + 1)
        offsets = [TopicPartition(t, p, o) for (t, p), o in ends.items()]
        try:
            consumer.store_offsets(offsets=offsets)
        except Exception as exc:  # e.g. during a rebalance: redelivered, absorbed
            log.warning("offset not stored (%s); the events will be redelivered", exc)

    def _sweep(self, decoder: Decoder) -> None:
        assert self._reads is not None
        sweep(self.processor, self._reads, decoder)

    def _measure(self, consumer: KafkaConsumer) -> None:
        assert self._reads is not None
        row = self._reads.execute(guards.PENDING).fetchone()
        if row:
            metrics.QUARANTINED.labels(self.app.name).set(row[0])
            metrics.PARKED.labels(self.app.name).set(row[1])
            metrics.OLDEST_PENDING.labels(self.app.name).set(row[2])
        if self.kafka_down.failing:
            # Quiet brokers send no message to say they are back: ask for metadata.
            try:
                consumer.list_topics(self.config.topics[0], timeout=1)
                self.kafka_down.ok()
            except Exception as exc:  # still away
                self.kafka_down.failed(exc)
        try:
            assigned = consumer.assignment()
            for tp in consumer.position(assigned):
                # From the last fetch response: a broker round trip per
                # partition (cached=False) would stall the loop for seconds.
                _, high = consumer.get_watermark_offsets(tp, cached=True)
                if high < 0:
                    continue
                behind = high - tp.offset if tp.offset != OFFSET_INVALID else high
                metrics.LAG.labels(self.app.name, tp.topic, str(tp.partition)).set(max(behind, 0))
        except Exception as exc:  # lag is best effort; the loop goes on
            log.debug("lag not measured: %s", exc)

    def stop(self) -> None:
        self.stopping.set()
