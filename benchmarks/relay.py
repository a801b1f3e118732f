"""Relay throughput, memory and latency, beside a bare confluent-kafka produce loop.

- drain: a backlog of N outbox rows (written in bulk with SQL: the relay
  only reads the outbox) published by one ``handoff relay --once`` process,
  its RSS sampled while it runs;
- bare: the same number of pre-serialised records through a producer with
  the relay's settings, nothing else;
- latency: a steady rate of real emits with the relay running; latency is
  the broker's LogAppendTime of each event minus its ``occurredAt``.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import Consumer, Producer

from benchmarks import topics
from benchmarks.stats import peak_rss, percentile
from handoff.core.events import current_schema, encode, to_record
from handoff.core.kafka import producer as relay_producer
from handoff.core.settings import HandoffSettings
from handoff.relay.kafka_io import headers

BACKLOG_DOCS = 10_000  # documents of a backlog; a row's version is its number / this + 1

# Rows numbered start..stop as emits write them; occurredAt is each row's own
# clock. bench relay fills its backlog with it (the relay starts after).
ROWS = f"""
INSERT INTO handoff.outbox (tenant_id, document_id, run_id, version, event_id, event_type, payload)
SELECT %(tenant)s, 'doc-' || (g %% {BACKLOG_DOCS}), 1, g / {BACKLOG_DOCS} + 1,
       %(tenant)s || '-' || g, 'handed',
       jsonb_build_object(
           'eventId', %(tenant)s || '-' || g, 'eventType', 'handed',
           'source', 'o01', 'occurredAt', handoff._micros(clock_timestamp()),
           'tenantId', %(tenant)s, 'documentId', 'doc-' || (g %% {BACKLOG_DOCS}), 'runId', 1,
           'version', g / {BACKLOG_DOCS} + 1, 'correlationId', NULL, 'causationId', NULL,
           'owner', 'o' || (g %% 50), 'previousOwner', 'o01', 'status', 'working',
           'assignedAt', handoff._micros(clock_timestamp()), 'dueAt', NULL,
           'completed', false, 'completedAt', NULL,
           'data', jsonb_build_object('amount', g, 'note', 'benchmark row'))
  FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g
"""
# The same with the emit's wake-up of an idle relay (relay_wakeup): bench peer's
# rows, written while a relay waits. One server only: on Citus this statement
# (a CTE updating a coordinator table beside an INSERT ... SELECT into a
# distributed one) wrote every payload field computed from g as NULL (Citus
# 14.0.1, seen 2026-12-03), so ROWS fills the backlog there.
#
# Its rows have their transaction's xid before their ids, as every outbox row
# has since 0031_outbox_xid_first (the column's default takes it first). Before
# it, a row whose id was drawn just before a relay's probe read the last id, by
# a transaction that got its xid just after, was passed by the bound and never
# published: bench peer's latency phase once waited 120 s for 1 of 400 rows.
FILL = f"""
WITH wake AS (
    UPDATE handoff.relay_wakeup SET waiting = false WHERE waiting
    RETURNING pg_notify('handoff_outbox', '')
)
{ROWS}"""


@dataclass
class DrainResult:
    rows: int
    seconds: float
    events_per_s: float
    max_rss_mb: float


def fill_backlog(settings: HandoffSettings, rows: int, progress: Any) -> str:
    tenant = f"relaybench-{uuid.uuid4().hex[:6]}"
    chunk = 100_000
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        for start in range(0, rows, chunk):
            conn.execute(
                ROWS, {"tenant": tenant, "start": start, "stop": min(rows, start + chunk) - 1}
            )
            progress(min(rows, start + chunk))
        conn.execute("VACUUM ANALYZE handoff.outbox")
    return tenant


def settle(superuser_url: str, *, vacuum: bool) -> None:
    """Checkpoints what was written (after vacuuming the outbox, with ``vacuum``)."""
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        if vacuum:
            conn.execute("VACUUM ANALYZE handoff.outbox")
        conn.execute("CHECKPOINT")


def pending_rows(settings: HandoffSettings) -> int:
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM handoff.outbox_pending").fetchone()
    return int(row[0]) if row else 0


def drain(home: str, topic: str, rows: int) -> DrainResult:
    env = {
        **os.environ,
        "HANDOFF_HOME": home,
        "HANDOFF_RELAY_DEFAULT_TOPIC": topic,
        "HANDOFF_RELAY_BATCH_SIZE": "5000",
    }
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "relay", "--once"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak = peak_rss(proc, every_s=0.2)
    elapsed = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"relay exited with {proc.returncode}")
    return DrainResult(rows, elapsed, rows / elapsed, peak / 1e6)


def bare_loop(settings: HandoffSettings, topic: str, rows: int) -> float:
    """Events per second of a producer alone, on pre-serialised records.

    The same Kafka work as the relay's (key, value, the five headers, the
    producer settings); none of its database or encoding work.
    """
    schema = current_schema()
    samples = []
    for i in range(10_000):
        payload = {
            "eventId": f"bare-{i}", "eventType": "handed", "source": "o01",
            "occurredAt": 1_764_410_400_000_000, "tenantId": "bare",
            "documentId": f"doc-{i}", "runId": 1, "version": 1, "owner": f"o{i % 50}",
            "previousOwner": "o01", "status": "working",
            "assignedAt": 1_764_410_400_000_000, "completed": False,
            "data": {"amount": i, "note": "benchmark row"},
        }  # fmt: skip
        samples.append(
            (
                f"bare/doc-{i}".encode(),
                encode(schema, 1, to_record(payload, 2)),
                headers(payload),
            )
        )
    producer: Producer = relay_producer(
        settings.kafka_bootstrap, linger_ms=5, delivery_timeout_s=60
    )
    began = time.perf_counter()
    for n in range(rows):
        key, value, hdrs = samples[n % len(samples)]
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=hdrs)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    return rows / (time.perf_counter() - began)


def _pace(
    database_url: str, tokens: dict[str, str], rate: float, seconds: float, seed: int,
    start: Any,
) -> None:  # fmt: skip
    from handoff.core.emitter import emit_as
    from handoff.core.identity import Credential
    from handoff.core.models import CreateRequest, HandoffRequest

    creds = {n: Credential.parse(t) for n, t in tokens.items()}
    names = sorted(creds)
    with psycopg.connect(database_url, autocommit=True) as conn:
        docs = {f"lat-{seed}-{k}": ("o01", 1) for k in range(20)}
        for doc in docs:
            emit_as(conn, creds["o01"], CreateRequest(event_id=str(uuid.uuid4()), document_id=doc,
                                                      owner="o01", status="new"))  # fmt: skip
        order = list(docs)
        start.wait()  # every worker imported and connected: no start-up in the measured window
        began = time.perf_counter()
        n = 0
        while (elapsed := time.perf_counter() - began) < seconds:
            if n > elapsed * rate:
                time.sleep(min(0.01, (n - elapsed * rate) / rate))
                continue
            doc = order[n % len(order)]
            owner, version = docs[doc]
            target = names[(names.index(owner) + 1 + n % 7) % len(names)]
            emit_as(conn, creds[owner], HandoffRequest(
                event_id=str(uuid.uuid4()), event_type="handed", document_id=doc,
                next_owner=target, status="working", expected_version=version))  # fmt: skip
            docs[doc] = (target, version + 1)
            n += 1


@dataclass
class Latency:
    """Emit commit -> broker append (ms), and its first segment, emit commit -> relay fetch
    (the relay's timing header): a slow fetch shows there, a slow produce or broker after."""

    p50_ms: float
    p99_ms: float
    count: int
    fetch_p50_ms: float
    fetch_p99_ms: float


def latency(
    settings: HandoffSettings, home: str, tokens: dict[str, str], tenant: str, rate: float,
    seconds: float,
) -> Latency:  # fmt: skip
    """Emit commit -> broker append at a steady rate."""
    topic = f"bench.latency.{uuid.uuid4().hex[:6]}"
    topics.make(settings, topic, log_append_time=True)
    env = {**os.environ, "HANDOFF_HOME": home, "HANDOFF_RELAY_DEFAULT_TOPIC": topic,
           "HANDOFF_RELAY_TRACE_TIMING": "true"}  # fmt: skip
    relay = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "relay"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(4)  # registered, slots taken, idle
        ctx = multiprocessing.get_context("spawn")
        workers = 4
        start = ctx.Barrier(workers)
        procs = [
            ctx.Process(
                target=_pace,
                args=(settings.database_url, tokens, rate / workers, seconds, i, start),
            )
            for i in range(workers)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        time.sleep(3)
    finally:
        relay.terminate()
        relay.wait(30)
    try:
        return _latencies(settings, topic, tenant)
    finally:
        topics.delete(settings, [topic])


def _latencies(settings: HandoffSettings, topic: str, tenant: str) -> Latency:
    from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    found: list[float] = []
    to_fetch: list[float] = []
    with SchemaRegistryClient({"url": settings.schema_registry_url, "timeout": 10}) as registry:
        decode = AvroDeserializer(
            registry, conf={"subject.name.strategy": topic_subject_name_strategy}
        )
        consumer = Consumer(
            {"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"lat-{uuid.uuid4().hex}",
             "auto.offset.reset": "earliest"}
        )  # fmt: skip
        consumer.subscribe([topic])
        quiet = 0
        while quiet < 6:
            batch = consumer.consume(1000, 0.5)
            quiet = 0 if batch else quiet + 1
            for msg in batch:
                marks = dict(msg.headers() or [])
                if msg.error() or marks.get("tenant") != tenant.encode():
                    continue
                if marks.get("eventType") != b"handed":  # the paced handoffs, not the set-up
                    continue
                event = decode(msg.value(), None)
                _, appended_ms = msg.timestamp()
                occurred = event["occurredAt"].timestamp() * 1000
                found.append(appended_ms - occurred)
                to_fetch.append(int(marks.get("relayFetchedAt") or 0) / 1000 - occurred)
        consumer.close()
    found.sort()
    to_fetch.sort()
    return Latency(percentile(found, 50), percentile(found, 99), len(found),
                   percentile(to_fetch, 50), percentile(to_fetch, 99))  # fmt: skip
