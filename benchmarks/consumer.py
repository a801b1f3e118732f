"""Guarded consumer throughput, memory and hop latency, side by side in one run.

- bare: a plain confluent-kafka consume-and-decode loop (registry schema,
  fastavro) over the same events: the ceiling of reading at all;
- batched / batch 1: ``handoff consume`` processes with a one-INSERT local
  effect, guard, ordering and offsets included; rate from the effects' own
  commit-side timestamps (group join and start-up excluded); peak RSS sampled;
  batch 1 in one lane with its units sent ahead (the default), the same with
  each unit sent once the one before it committed (``QUEUE_AHEAD=0``), and
  with ``--concurrency`` lanes (units of different documents overlapping,
  each its own transaction);
- pgbench: one client running a one-INSERT transaction on the same server,
  the floor a batch-1 consumer (one transaction per event) is compared with,
  and one running the guarded one-event unit (the database's share of batch 1);
- a Python client: the same guarded unit sent by psycopg as the consumer sends
  its unit (one message, values bound in its text), no Kafka, no decoding: what
  is left of pgbench's rate once the client is Python; batch 1 sits between;
- hop: creates paced at a steady rate with a relay and a consumer running;
  the consumer hands each document on; latency = its unit's commit minus
  the event's ``occurredAt`` (the emit's transaction), taken apart by
  segment in benchmarks/hop.py.

Everything created is removed afterwards: rows, services and roles, topics.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import fastavro
import psutil
import psycopg
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from benchmarks import hop, pgbench, topics
from benchmarks.consumer_app import EFFECTS_DDL
from benchmarks.tenants import remove_tenant
from handoff.core import guards_sql as guards
from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.core.wire import Wire

Progress = Callable[[str], None]
SERVICES = ("creator", "bench-batched", "bench-single", "bench-alone", "bench-lanes", "bench-hop",
            "bench-next", "bench-pg", "bench-claim")  # fmt: skip
LANES = 4  # batch 1's units in flight at once in the lanes run

# The one-INSERT transaction the guarded unit is held against.
INSERT_ONE = """\\set n random(1, 1000000000)
INSERT INTO handoff_bench.pgbench_insert (n) VALUES (:n);
"""

# The guarded unit of one event as a C client runs it: the database's share of
# a batch-1 consumer (guard, ordering, one effect row, commit) without Python,
# librdkafka or decoding, in one round trip as the consumer sends it. Each
# transaction takes a new event of a random document the benchmark created
# (applied the first time, stale after: the verdict-reading guard, since a
# claim would refuse the stale ones).
GUARDED = """\\set n random(1, {documents})
\\startpipeline
BEGIN;
SELECT verdict FROM handoff.consumer_begin(
    jsonb_build_array(jsonb_build_object('eventId', md5(random()::text), 'fingerprint', '00',
                                         'documentId', 't-doc-' || :n, 'runId', 1,
                                         'version', 1)),
    ARRAY['created'], NULL, false);
INSERT INTO handoff_bench.effects (tenant_id, consumer, event_id, occurred_at)
VALUES (:tenant, 'bench-pg', :n, now());
COMMIT;
\\endpipeline
"""

# The guarded unit's two rows as plain INSERTs, with no guard function and no reads:
# the floor under any guard that writes this guard row in the unit's transaction.
# Run as the tables' owner (the service may write guard rows only through the
# guard). Its event ids are new, so every guard row is inserted.
FLOOR = """\\set n random(1, {documents})
\\startpipeline
BEGIN;
INSERT INTO handoff.consumer_guards (tenant_id, consumer, event_id, fingerprint, document_id,
                                     run_id, version)
VALUES (:tenant, 'bench-pg', md5(random()::text), '\\x00', 't-doc-' || :n, 1, 1);
INSERT INTO handoff_bench.effects (tenant_id, consumer, event_id, occurred_at)
VALUES (:tenant, 'bench-pg', :n, now());
COMMIT;
\\endpipeline
"""

# The unit batch 1 sends: the one-event claim (consumer_claim_one) and the effect row.
# The claim refuses (and pgbench stops) unless the event is to be applied, so each
# transaction takes the next document, once: run for as many transactions as there
# are documents (n counts them; pgbench keeps a client's variables between them).
CLAIMED = """\\set n :n + 1
\\startpipeline
BEGIN;
SELECT handoff.consumer_claim_one(md5(random()::text), '\\x00', 't-doc-' || :n, 1, 1,
                                  ARRAY['created'], NULL);
INSERT INTO handoff_bench.effects (tenant_id, consumer, event_id, occurred_at)
VALUES (:tenant, 'bench-claim', :n, now());
COMMIT;
\\endpipeline
"""

# The same unit's effect row for the Python client (its guard is guards.VERDICTS).
PY_EFFECT = (
    "INSERT INTO handoff_bench.effects (tenant_id, consumer, event_id, occurred_at)"
    " VALUES (%s, 'bench-py', %s, now())"
)

APPLIED = "SELECT count(*) FROM handoff_bench.effects WHERE tenant_id = %s AND consumer = %s"

CREATE_MANY = """
SELECT count(handoff.emit_direct('create', %(prefix)s || 'e-' || g, 'created',
                                 %(prefix)s || 'doc-' || g, NULL, NULL,
                                 %(owner)s, 'new', NULL, NULL, '{"amount": 1}'::jsonb, NULL,
                                 NULL))
  FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""


@dataclass
class Run:
    events: int
    per_s: float
    rss_mb: float
    # CPU-ms per event by part (the consumer, the stack's parts, "machine"), over the
    # window from its first effect to its last: start-up and the idle exit left out
    cpu_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class ConsumerResult:
    bare: Run
    batched: Run
    single: Run
    alone: Run  # batch 1, one lane, each unit sent once the one before it committed
    lanes: Run
    concurrency: int
    batch_size: int
    pgbench_tps: float
    pgbench_p50_ms: float
    pgbench_p99_ms: float
    guarded_tps: float
    guarded_p50_ms: float
    guarded_p99_ms: float
    claimed_tps: float  # the one-event claim and the effect row (CLAIMED)
    floor_tps: float  # the guard's row and the effect row as plain INSERTs (FLOOR)
    python_tps: float
    hop: hop.HopRun


class Bench:
    def __init__(self, settings: HandoffSettings, home: Path, progress: Progress) -> None:
        self.settings, self.home, self.say = settings, home, progress
        self.tenant = f"cbench-{uuid.uuid4().hex[:6]}"
        self.topics: list[str] = []
        self.creds: dict[str, Credential] = {}

    # -- set-up and clean-up ------------------------------------------------------------

    def prepare(self) -> None:
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            conn.execute(EFFECTS_DDL)
            for name in SERVICES:
                self.creds[name] = add_service(
                    conn, name, tenant=self.tenant, can_create=name == "creator"
                )

    def clean(self) -> None:
        remove_tenant(self.settings.database_url, self.tenant, self.creds,
                      extra=["handoff_bench.effects"])  # fmt: skip
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS handoff_bench.pgbench_insert")
        topics.delete(self.settings, self.topics)

    def topic(self, kind: str, *, log_append_time: bool = False) -> str:
        name = f"bench.consumer.{kind}.{uuid.uuid4().hex[:6]}"
        topics.make(self.settings, name, log_append_time)
        self.topics.append(name)
        return name

    def as_service(self, name: str) -> str:
        cred = self.creds[name]
        return make_conninfo(self.settings.database_url, user=cred.role, password=cred.secret)

    def fill(self, events: int, owner: str) -> None:
        with psycopg.connect(self.as_service("creator"), autocommit=True) as conn:
            step = 5000
            for first in range(1, events + 1, step):
                last = min(events, first + step - 1)
                conn.execute(
                    CREATE_MANY, {"prefix": "t-", "owner": owner, "first": first, "last": last}
                )
                self.say(f"  created {last:,} documents")

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "HANDOFF_HOME": str(self.home), **extra}

    def logs(self) -> Path:
        folder = self.home / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def publish(self, topic: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "handoff.cli", "relay", "--once"],
            env=self.env(HANDOFF_RELAY_DEFAULT_TOPIC=topic, HANDOFF_RELAY_BATCH_SIZE="5000"),
            check=True,
            capture_output=True,
        )

    # -- the measurements --------------------------------------------------------------

    def bare(self, topic: str, events: int) -> Run:
        """Consume and decode only: the registry's writer schema, fastavro, header filter."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.settings.kafka_bootstrap,
                "group.id": f"bare-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        schemas: dict[int, Any] = {}
        seen = 0
        began = 0.0
        with SchemaRegistryClient({"url": self.settings.schema_registry_url}) as registry:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 300
            while seen < events and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 1.0):
                    if msg.error():
                        continue
                    if not began:
                        began = time.perf_counter()
                    if dict(msg.headers() or []).get("tenant") != self.tenant.encode():
                        continue
                    value = msg.value() or b""
                    schema_id = int.from_bytes(value[1:5], "big")
                    if schema_id not in schemas:
                        text = registry.get_schema(schema_id).schema_str or ""
                        schemas[schema_id] = fastavro.parse_schema(json.loads(text))
                    fastavro.schemaless_reader(io.BytesIO(value[5:]), schemas[schema_id], None)
                    seen += 1
        elapsed = time.perf_counter() - began
        consumer.close()
        return Run(seen, seen / elapsed, psutil.Process().memory_info().rss / 1e6)

    def guarded(
        self, name: str, topic: str, events: int, batch_size: int, concurrency: int = 1,
        pids: dict[str, int | None] | None = None, **env: str,
    ) -> Run:  # fmt: skip
        """``handoff consume`` until it has applied every event; rate from its effects.

        The CPU each part spends (``pids``: the stack's processes) is read over
        the window from the first effect to the last, so that neither the
        consumer's start-up (its imports are seconds of CPU) nor its idle exit
        counts against the events.
        """
        log_path = self.logs() / f"bench-consumer-{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "handoff.cli", "consume", "benchmarks.consumer_app:app",
                 "--topic", topic, "--batch-size", str(batch_size),
                 "--concurrency", str(concurrency), "--idle-exit", "3"],
                env=self.env(BENCH_CONSUMER=name,
                              HANDOFF_CONSUMER_CREDENTIAL=self.creds[name].token, **env),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )  # fmt: skip
        meter = hop.CpuMeter({**(pids or {}), "consumer": proc.pid})
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            applied = partial(self.applied, conn, name)
            while proc.poll() is None and not applied():
                time.sleep(0.05)
            first = applied()
            meter.start()
            while proc.poll() is None and applied() < events:
                time.sleep(0.2)
            cpu = meter.per(applied() - first)
            proc.wait()
            if proc.returncode != 0:
                raise RuntimeError(f"consumer exited {proc.returncode}; see {log_path}")
            row = conn.execute(
                "SELECT count(*), extract(epoch FROM max(done_at) - min(done_at))"
                "  FROM handoff_bench.effects WHERE tenant_id = %s AND consumer = %s",
                (self.tenant, name),
            ).fetchone()
        assert row is not None
        count, span = int(row[0]), float(row[1] or 0)
        if count != events:
            raise RuntimeError(f"{name} applied {count} of {events} events")
        cpu.pop("pacer", None)  # the benchmark's own polling, not the consumer's work
        return Run(count, (count - 1) / span if span else float("nan"),
                   meter.peak_rss_mb["consumer"], cpu)  # fmt: skip

    def applied(self, conn: psycopg.Connection[Any], consumer: str) -> int:
        """The effects ``consumer`` has committed so far in this benchmark's tenant."""
        row = conn.execute(APPLIED, (self.tenant, consumer)).fetchone()
        return int(row[0]) if row else 0

    def pgbench_insert(self, seconds: int) -> pgbench.PgbenchResult:
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS handoff_bench.pgbench_insert (n bigint)")
        return pgbench.run_text(self.settings.database_url, INSERT_ONE, 1, seconds)

    def python_guarded(self, seconds: float, documents: int) -> float:
        """pgbench_guarded's unit from a Python client, as the service bench-pg; units/s.

        Sent by the consumer's own wire (core/wire.py): BEGIN, the guard, the
        effect row and COMMIT in one message, the values bound by the client.
        """
        done = 0
        with psycopg.connect(self.as_service("bench-pg"), autocommit=True) as conn:
            began = time.perf_counter()
            deadline = began + seconds
            while time.perf_counter() < deadline:
                document = f"t-doc-{random.randint(1, documents)}"
                event = {"eventId": uuid.uuid4().hex, "fingerprint": "00",
                         "documentId": document, "runId": 1, "version": 1}  # fmt: skip
                wire = Wire(conn)
                wire.write(guards.VERDICTS, {"events": Jsonb([event]), "types": ["created"],
                                             "owner": None, "reconcile": False})  # fmt: skip
                wire.write(PY_EFFECT, (self.tenant, document))
                wire.commit()
                done += 1
            return done / (time.perf_counter() - began)

    def pgbench_guarded(self, seconds: int, documents: int) -> pgbench.PgbenchResult:
        """The guarded one-event unit driven by pgbench, as the service bench-pg."""
        return pgbench.run_text(self.as_service("bench-pg"), GUARDED.format(documents=documents),
                                1, seconds, {"tenant": self.tenant})  # fmt: skip

    def pgbench_claimed(self, documents: int) -> pgbench.PgbenchResult:
        """The one-event claim's unit (CLAIMED) once for each document, as bench-claim."""
        defines = {"tenant": self.tenant, "n": 0}
        return pgbench.run_text(
            self.as_service("bench-claim"), CLAIMED, 1, 0, defines, transactions=documents
        )

    def pgbench_floor(self, seconds: int, documents: int) -> pgbench.PgbenchResult:
        """The guarded unit's two rows as plain INSERTs (FLOOR), as the tables' owner."""
        return pgbench.run_text(self.settings.database_url, FLOOR.format(documents=documents),
                                1, seconds, {"tenant": self.tenant})  # fmt: skip


def run(
    settings: HandoffSettings,
    home: Path,
    events: int,
    batch_size: int,
    rate: float,
    seconds: float,
    progress: Progress,
    stack_pids: dict[str, int | None],
) -> ConsumerResult:
    bench = Bench(settings, home, progress)
    bench.prepare()
    try:
        progress(f"  {events:,} documents for the throughput runs…")
        bench.fill(events, "bench-batched")
        topic = bench.topic("throughput")
        bench.publish(topic)
        progress("  bare consume-and-decode loop…")
        bare = bench.bare(topic, events)
        progress(f"  handoff consume, batch {batch_size}…")
        batched = bench.guarded("bench-batched", topic, events, batch_size, pids=stack_pids)
        progress("  handoff consume, batch 1…")
        single = bench.guarded("bench-single", topic, events, 1, pids=stack_pids)
        progress("  handoff consume, batch 1, each unit sent once the one before committed…")
        alone = bench.guarded("bench-alone", topic, events, 1, pids=stack_pids,
                              HANDOFF_CONSUMER_QUEUE_AHEAD="0")  # fmt: skip
        progress(f"  handoff consume, batch 1, {LANES} lanes…")
        lanes = bench.guarded("bench-lanes", topic, events, 1, LANES, pids=stack_pids)
        progress("  pgbench, one-INSERT transaction, one client…")
        insert = bench.pgbench_insert(max(int(seconds), 1))
        progress("  pgbench, the guarded one-event unit, one client…")
        guarded = bench.pgbench_guarded(max(int(seconds), 1), events)
        progress("  pgbench, the one-event claim's unit, once for each document…")
        claimed = bench.pgbench_claimed(events)
        progress("  pgbench, the unit's two rows as plain INSERTs (no guard function)…")
        floor = bench.pgbench_floor(max(int(seconds), 1), events)
        progress("  the same unit from a Python client (psycopg), one connection…")
        python_tps = bench.python_guarded(max(seconds, 1.0), events)
        progress(f"  hop latency at {rate:,.0f} handoffs/s for {seconds:.0f} s…")
        hopped = hop.measure(bench, rate, seconds, stack_pids)
    finally:
        progress("  removing what the benchmark created…")
        bench.clean()
    return ConsumerResult(
        bare, batched, single, alone, lanes, LANES, batch_size,
        insert.tps, insert.p50_ms, insert.p99_ms,
        guarded.tps, guarded.p50_ms, guarded.p99_ms, claimed.tps, floor.tps, python_tps,
        hopped,
    )  # fmt: skip
