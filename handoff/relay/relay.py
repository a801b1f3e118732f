"""The relay loop: fetch pending outbox rows of owned slots, produce, await acks, mark.

Rows are marked published only after the broker acknowledged them; a crash
anywhere before the mark republishes them (same event ids, so duplicates
are harmless to consumers). One batch is in flight at a time and is waited
for completely (delivered or failed) before the next fetch, so a retry never
overtakes an earlier attempt of the same document.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import KafkaError, Message, Producer

from handoff.core.errors import Unavailable
from handoff.core.events import EventEncodingError, EventSchema, encode, to_record
from handoff.core.settings import HandoffSettings
from handoff.relay import metrics
from handoff.relay.kafka_io import ensure_topics, headers, producer, register_schemas
from handoff.relay.outbox_sql import (
    BACKLOG,
    FETCH_PENDING,
    MARK_PUBLISHED,
    PARK,
    PURGE,
    SET_WAITING,
)
from handoff.relay.settings import RelaySettings
from handoff.relay.slots import SlotOwner

log = logging.getLogger("handoff.relay")

PURGE_BATCH = 10_000


@dataclass
class Row:
    id: int
    tenant_id: str
    document_id: str
    version: int
    event_type: str
    payload: dict[str, Any]

    @property
    def document(self) -> tuple[str, str]:
        return self.tenant_id, self.document_id


class Relay:
    def __init__(self, settings: HandoffSettings, relay: RelaySettings) -> None:
        self.settings = settings
        self.config = relay
        self.stopping = threading.Event()
        self.published = 0
        self._acked: set[int] = set()
        self._failed: set[int] = set()

    # -- setup -------------------------------------------------------------------

    def _start_kafka(self) -> tuple[Producer, EventSchema, dict[str, int]]:
        topics = self.config.topics()
        ensure_topics(self.settings.kafka_bootstrap, topics, self.config.topic_partitions)
        schema, ids = register_schemas(self.settings.schema_registry_url, topics)
        log.info("schema v%s registered for %s", schema.version, ", ".join(topics))
        return (
            producer(
                self.settings.kafka_bootstrap,
                linger_ms=self.config.linger_ms,
                delivery_timeout_s=self.config.delivery_timeout_s,
            ),
            schema,
            ids,
        )

    # -- the loop ------------------------------------------------------------------

    def run(self, *, once: bool = False) -> int:
        """Publish until stopped (or, with ``once``, until nothing is pending). Returns count."""
        setup_failures = 0
        while True:
            try:
                self.producer, self.schema, self.schema_ids = self._start_kafka()
                break
            except Unavailable as exc:
                setup_failures += 1
                metrics.FAILURES.labels("setup").inc()
                log.warning("Kafka or registry unavailable (%s); retrying", exc)
                if self.stopping.wait(self._backoff(setup_failures)):
                    return self.published
        failures = 0
        while not self.stopping.is_set():
            try:
                with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
                    failures = 0
                    if self._session(conn, once=once):
                        break
            except psycopg.OperationalError as exc:
                failures += 1
                metrics.FAILURES.labels("database").inc()
                metrics.SLOTS_OWNED.set(0)
                log.warning("database connection lost (%s); reconnecting", exc)
                self.stopping.wait(self._backoff(failures))
        self.producer.flush(self.config.delivery_timeout_s)
        return self.published

    def _session(self, conn: psycopg.Connection[Any], *, once: bool) -> bool:
        """One database session; True when --once found nothing left to do."""
        conn.execute("LISTEN handoff_outbox")
        slots = SlotOwner(conn)
        next_rebalance = next_metrics = next_purge = 0.0
        delivery_failures = 0
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= next_rebalance:
                slots.rebalance(take_all=once)
                metrics.SLOTS_OWNED.set(len(slots.owned))
                next_rebalance = now + self.config.rebalance_interval_s
            if now >= next_metrics:
                self._measure(conn)
                next_metrics = now + self.config.metrics_interval_s
            if now >= next_purge:
                self._purge(conn)
                next_purge = now + self.config.purge_interval_s
            rows = self._fetch(conn, slots)
            if rows:
                if self._publish(conn, rows):
                    delivery_failures = 0
                else:
                    delivery_failures += 1
                    self.stopping.wait(self._backoff(delivery_failures))
                continue
            if once:
                return True
            # Idle: ask emits to notify, look once more (a row committed just
            # before the flag was set gets no NOTIFY), then wait.
            conn.execute(SET_WAITING)
            if rows := self._fetch(conn, slots):
                self._publish(conn, rows)
                continue
            for _ in conn.notifies(timeout=self.config.poll_interval_s, stop_after=1):
                pass
        return False

    def _fetch(self, conn: psycopg.Connection[Any], slots: SlotOwner) -> list[Row]:
        if not slots.owned:
            return []
        cursor = conn.execute(
            FETCH_PENDING, {"slots": sorted(slots.owned), "limit": self.config.batch_size}
        )
        return [Row(*r) for r in cursor]

    # -- publishing ----------------------------------------------------------------

    def _delivered(self, row_id: int, err: KafkaError | None, _msg: Message) -> None:
        (self._failed if err is not None else self._acked).add(row_id)
        if err is not None:
            log.warning("delivery of outbox row %s failed: %s", row_id, err)

    def _publish(self, conn: psycopg.Connection[Any], rows: list[Row]) -> bool:
        """Produce a batch, wait for every ack, mark what may be marked. False on failures."""
        self._acked.clear()
        self._failed.clear()
        blocked: set[tuple[str, str]] = set()
        sent: list[Row] = []
        for row in rows:
            if row.document in blocked:
                continue
            owner = row.payload.get("owner")
            topic = self.config.topic_for(row.event_type, owner)
            try:
                value = encode(
                    self.schema, self.schema_ids[topic], to_record(row.payload, self.schema.version)
                )
            except EventEncodingError as exc:
                conn.execute(PARK, {"id": row.id, "reason": str(exc)[:1000]})
                metrics.FAILURES.labels("encode").inc()
                log.error("parked outbox row %s (%s/%s): %s", row.id, *row.document, exc)
                blocked.add(row.document)
                continue
            self._produce(
                topic,
                value,
                f"{row.tenant_id}/{row.document_id}".encode(),
                headers(row.event_type, owner, row.tenant_id, row.version),
                row.id,
            )
            sent.append(row)
        self.producer.flush(self.config.delivery_timeout_s + 5)
        if self.config.fault_kill_after_ack and self._acked:
            os.kill(os.getpid(), signal.SIGKILL)  # test only: acked, not yet marked
        # Mark, per document, only the acked prefix: a later row acked after
        # an earlier one failed is sent again with it, in order.
        failed_docs: set[tuple[str, str]] = set()
        marked = []
        for row in sent:
            if row.document in failed_docs:
                continue
            if row.id in self._acked:
                marked.append(row.id)
            else:
                failed_docs.add(row.document)
        if marked:
            conn.execute(MARK_PUBLISHED, {"ids": marked})
            self.published += len(marked)
            metrics.PUBLISHED.inc(len(marked))
        if failed_docs:
            metrics.FAILURES.labels("delivery").inc(len(sent) - len(marked))
        return not failed_docs

    def _produce(self, topic: str, value: bytes, key: bytes, hdrs: list[Any], row_id: int) -> None:
        while True:
            try:
                self.producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=hdrs,
                    on_delivery=functools.partial(self._delivered, row_id),
                )
                break
            except BufferError:  # local queue full: let deliveries drain it
                self.producer.poll(0.05)
        self.producer.poll(0)

    # -- housekeeping -------------------------------------------------------------

    def _measure(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(BACKLOG).fetchone()
        if row:
            metrics.BACKLOG.set(row[0])
            metrics.OLDEST_AGE.set(float(row[1] or 0))
            metrics.PARKED.set(row[2])

    def _purge(self, conn: psycopg.Connection[Any]) -> None:
        seconds = self.config.retention_hours * 3600
        while True:
            deleted = conn.execute(PURGE, {"seconds": seconds, "limit": PURGE_BATCH}).rowcount
            metrics.PURGED.inc(deleted)
            if deleted < PURGE_BATCH or self.stopping.is_set():
                break

    def _backoff(self, failures: int) -> float:
        return random.uniform(0, min(self.config.max_backoff_s, 0.2 * 2**failures))

    def stop(self) -> None:
        self.stopping.set()
