"""``handoff bench peer``: ``handoff relay`` beside Debezium's outbox connector, one outbox.

Both publishers read the same ``handoff.outbox`` table of a logical-WAL
PostgreSQL of the stack's binaries (benchmarks/peer_stack.py) into topics
of the stack's Kafka whose records carry the broker's append time. They
take turns, never running together, and each scenario starts from an empty,
vacuumed outbox (that set-up is outside every measured window):

- drain, one-row transactions: a backlog written while the publisher is
  down, one row per transaction as emits write it;
- drain, one transaction: the same backlog in one ``INSERT … SELECT``;
- latency: one-row transactions at a steady rate with the publisher
  running; commit (the row's ``occurredAt``, its statement's clock) to the
  broker's append time;
- kill: a one-row backlog, the publisher SIGKILLed when half of it is on the
  topic, then started again: duplicates (deliveries of an event id already
  delivered) and per-key reorders (a first delivery of a version below one
  already delivered for its document).

The drain rate is the rows over the time from the first to the last append,
so neither the JVM's nor Python's start-up counts in it; start-up is its own
row. CPU is each publisher's process and the PostgreSQL server's, over the
drain. Rows are written the way emits write them, with the emit's wake-up of
an idle relay (relay_wakeup); Debezium pays that statement too.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from confluent_kafka import Consumer, Message
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer

from benchmarks import topics
from benchmarks.hop import CpuMeter
from benchmarks.peer_stack import (
    Child,
    ConnectWorker,
    LogicalPostgres,
    prepare_publication,
    reset_slot,
)
from benchmarks.relay import BACKLOG_DOCS, FILL, settle
from benchmarks.stats import markdown_table, percentile
from handoff.core.settings import HandoffSettings
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until

CAVEATS = """\
Caveats, read before quoting the table:
- Serialisation differs. The relay encodes each row as registry-framed Avro
  (the schema registered once, five headers); Debezium, configured as its
  outbox guide shows, sends the payload column's JSON text (StringConverter)
  with an `id` header. Avro is the more work per event.
- Transaction sizes differ in their cost. Debezium receives a transaction
  only at its commit (pgoutput, no streaming of in-progress ones), so one
  large transaction arrives all at once; the relay reads committed rows by
  id, whatever transaction wrote them.
- Debezium's latency is mostly its poll.interval.ms (500 ms by default): its
  task waits that long for a batch to fill. A lower value buys latency with
  CPU; not measured here, where both run as shipped.
- Both run their defaults: the relay's batch of 2,000 and linger 5 ms;
  Debezium's max.batch.size 2,048 and Connect's producer and offset flush
  (every 60 s). Debezium's duplicates after a kill are what its at-least-once
  contract allows: it replays from its last flushed offset. The relay
  republishes only the rows it had produced but not yet marked.
- One machine: PostgreSQL, Kafka, the registry, the publisher and this
  process share two cores; these are cost figures, not scaling figures.
"""


class Publisher(Protocol):
    name: str

    def before_backlog(self) -> None: ...
    def start(self, topic: str) -> None: ...
    def pid(self) -> int | None: ...
    def kill(self) -> None: ...
    def resume(self) -> None: ...
    def stop(self) -> None: ...


class Relay(Child):
    """``handoff relay`` (long-running, its defaults) against the peer database."""

    name = "handoff relay"

    def __init__(self, home: str, database_url: str) -> None:
        super().__init__()
        self.home = home
        self.database_url = database_url

    def before_backlog(self) -> None:
        pass

    def start(self, topic: str) -> None:
        self.spawn([sys.executable, "-m", "handoff.cli", "relay"],
                   env={**os.environ, "HANDOFF_HOME": self.home,
                        "HANDOFF_DATABASE_URL": self.database_url,
                        "HANDOFF_RELAY_DEFAULT_TOPIC": topic})  # fmt: skip


class Debezium:
    """The Debezium PostgreSQL connector and its Outbox Event Router in Connect standalone."""

    name = "Debezium"

    def __init__(self, worker: ConnectWorker, superuser_url: str) -> None:
        self.worker = worker
        self.superuser_url = superuser_url

    def before_backlog(self) -> None:
        reset_slot(self.superuser_url, create=True)

    def start(self, topic: str) -> None:
        self.worker.start(topic)

    def pid(self) -> int | None:
        return self.worker.pid()

    def kill(self) -> None:
        self.worker.kill()

    def resume(self) -> None:
        self.worker.resume()

    def stop(self) -> None:
        self.worker.stop()
        reset_slot(self.superuser_url, create=False)


@dataclass
class Tally:
    """What reached a topic, counted without keeping the records: deliveries per row
    number, the highest version first-delivered per document, the append times."""

    tenant: str
    rows: int
    deliveries: array[int] = field(init=False)
    top: array[int] = field(init=False)
    distinct: int = 0
    duplicates: int = 0
    reorders: int = 0
    first_ms: float = 0.0
    last_ms: float = 0.0
    latencies: list[float] = field(default_factory=list)
    probes: int = 0

    def __post_init__(self) -> None:
        self.deliveries = array("I", bytes(4 * self.rows))
        self.top = array("i", [0] * BACKLOG_DOCS)

    def add(self, number: int, version: int, appended_ms: float, occurred_ms: float) -> None:
        if self.deliveries[number]:
            self.duplicates += 1
        else:
            self.distinct += 1
            doc = number % BACKLOG_DOCS
            if version < self.top[doc]:
                self.reorders += 1
            self.top[doc] = max(self.top[doc], version)
            self.first_ms = min(self.first_ms or appended_ms, appended_ms)
            self.last_ms = max(self.last_ms, appended_ms)
            self.latencies.append(appended_ms - occurred_ms)
        self.deliveries[number] += 1


Decoded = tuple[str, str, int, float]  # tenant, event id, version, occurredAt (ms)


def relay_decoder(registry: SchemaRegistryClient) -> Callable[[Message], Decoded]:
    avro = AvroDeserializer(registry, conf={"subject.name.strategy": topic_subject_name_strategy})

    def decode(msg: Message) -> Decoded:
        event = avro(msg.value(), None)
        return (event["tenantId"], event["eventId"], int(event["version"]),
                event["occurredAt"].timestamp() * 1000)  # fmt: skip

    return decode


def debezium_decode(msg: Message) -> Decoded:
    event = json.loads(msg.value() or b"{}")
    return (event["tenantId"], event["eventId"], int(event["version"]),
            event["occurredAt"] / 1000)  # fmt: skip


class Watcher:
    """Reads a scenario's topic from its start in a thread of its own, into a Tally."""

    def __init__(self, settings: HandoffSettings, topic: str, tally: Tally,
                 decode: Callable[[Message], Decoded]) -> None:  # fmt: skip
        self.tally = tally
        self.decode = decode
        self.last_record = time.monotonic()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"peer-{uuid.uuid4().hex}",
             "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )  # fmt: skip
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        prefix = self.tally.tenant + "-"
        while not self._stop.is_set():
            for msg in self._consumer.consume(1000, 0.2):
                if msg.error():
                    continue
                self.last_record = time.monotonic()
                tenant, event_id, version, occurred_ms = self.decode(msg)
                if tenant != self.tally.tenant:
                    self.tally.probes += 1
                    continue
                _, appended_ms = msg.timestamp()
                number = int(event_id.removeprefix(prefix))
                self.tally.add(number, version, float(appended_ms), occurred_ms)

    def wait(self, check: Callable[[Tally], bool], timeout_s: float, what: str) -> None:
        if not wait_until(lambda: check(self.tally), timeout_s, interval_s=0.05):
            raise TimeoutError(f"{what}: {self.tally.distinct:,} of {self.tally.rows:,} "
                               f"rows on the topic after {timeout_s:.0f} s")  # fmt: skip

    def wait_quiet(self, seconds: float) -> None:
        while time.monotonic() - self.last_record < seconds:
            time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


@dataclass
class Drain:
    events_per_s: float
    start_s: float
    cpu_s: float
    pg_cpu_s: float
    rss_mb: float


@dataclass
class Steady:
    p50_ms: float
    p99_ms: float
    events: int
    cpu_s: float
    rss_mb: float


@dataclass
class Killed:
    duplicates: int
    reorders: int
    recovered_s: float


@dataclass
class Outcome:
    """One publisher's figures in one run."""

    one_row: Drain
    bulk: Drain
    steady: Steady
    killed: Killed


class Peer:
    """The peer database, the Connect worker and the scenarios run against them."""

    def __init__(self, stack: LocalStack, settings: HandoffSettings, rows: int,
                 progress: Callable[[str], None]) -> None:  # fmt: skip
        self.stack = stack
        self.settings = settings
        self.rows = rows
        self.progress = progress
        self.db = LogicalPostgres(stack.layout, stack.state, stack.console)
        self.topics: list[str] = []
        self.worker: ConnectWorker | None = None
        self.admin_url = self.db.superuser_url("handoff")
        self.registry = SchemaRegistryClient({"url": settings.schema_registry_url, "timeout": 10})

    # -- set-up and clean-up ---------------------------------------------------------

    def prepare(self) -> None:
        from handoff.stack.migrate import upgrade

        self.progress("  a logical-WAL PostgreSQL of the stack's binaries…")
        self.db.prepare()
        self.db.start()
        self.db.bootstrap()
        upgrade(self.settings.model_copy(update={"database_url": self.db.app_url()}))
        prepare_publication(self.admin_url)
        reset_slot(self.admin_url, create=False)
        self.worker = ConnectWorker(
            self.stack.layout, self.stack.console, self.db, self.settings.kafka_bootstrap
        )

    def publishers(self) -> list[Publisher]:
        assert self.worker is not None
        return [Relay(str(self.stack.layout.home), self.db.app_url()),
                Debezium(self.worker, self.admin_url)]  # fmt: skip

    def close(self) -> None:
        """Stop what was started, drop the topics, the peer database's folder."""
        self.registry.close()
        if self.worker is not None:
            self.worker.stop()
        topics.delete(self.settings, self.topics)
        if self.db.pid() is not None:
            self.db.stop()
        shutil.rmtree(self.db.data.parent, ignore_errors=True)
        if self.worker is not None:
            shutil.rmtree(self.worker.dir, ignore_errors=True)

    def _topic(self, kind: str) -> str:
        topic = f"bench.peer.{kind}.{uuid.uuid4().hex[:6]}"
        topics.make(self.settings, topic, log_append_time=True)
        self.topics.append(topic)
        return topic

    def _empty_outbox(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("TRUNCATE handoff.outbox")
        settle(self.admin_url, vacuum=True)

    # -- writing -----------------------------------------------------------------------

    def _write_one_row(self, tenant: str, rows: int) -> None:
        """``rows`` one-row transactions, pipelined (a Sync after each: each its own
        transaction), with asynchronous commits: a backlog, written fast."""
        with psycopg.connect(self.db.app_url(), autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            with conn.pipeline() as pipeline:
                for g in range(rows):
                    conn.execute(FILL, {"tenant": tenant, "start": g, "stop": g})
                    pipeline.sync()

    def _write_bulk(self, tenant: str, rows: int) -> None:
        with psycopg.connect(self.db.app_url(), autocommit=True) as conn:
            conn.execute(FILL, {"tenant": tenant, "start": 0, "stop": rows - 1})

    def _pace(self, tenant: str, rate: float, seconds: float) -> int:
        """One-row transactions at ``rate`` for ``seconds`` (synchronous commits, as emits),
        from four connections: each writes its own documents, so versions stay in order."""
        lanes = 4
        done = [0] * lanes

        def lane(n: int) -> None:
            with psycopg.connect(self.db.app_url(), autocommit=True) as conn:
                began = time.perf_counter()
                sent = 0
                while (elapsed := time.perf_counter() - began) < seconds:
                    if sent > elapsed * rate / lanes:
                        time.sleep(min(0.01, (sent - elapsed * rate / lanes) / (rate / lanes)))
                        continue
                    g = sent * lanes + n
                    conn.execute(FILL, {"tenant": tenant, "start": g, "stop": g})
                    sent += 1
                done[n] = sent

        threads = [threading.Thread(target=lane, args=(n,)) for n in range(lanes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done)

    def _probe_until_seen(self, watcher: Watcher, timeout_s: float = 120) -> None:
        """Rows of another tenant until one reaches the topic: the publisher is streaming."""
        deadline = time.monotonic() + timeout_s
        with psycopg.connect(self.db.app_url(), autocommit=True) as conn:
            n = 0
            while watcher.tally.probes == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no probe row reached the topic in {timeout_s:.0f} s")
                conn.execute(FILL, {"tenant": f"probe-{uuid.uuid4().hex[:6]}", "start": n,
                                    "stop": n})  # fmt: skip
                n += 1
                time.sleep(0.5)

    # -- scenarios -------------------------------------------------------------------------

    def _decoder(self, publisher: Publisher) -> Callable[[Message], Decoded]:
        return relay_decoder(self.registry) if isinstance(publisher, Relay) else debezium_decode

    def drain(self, publisher: Publisher, *, bulk: bool) -> Drain:
        self._empty_outbox()
        publisher.before_backlog()
        tenant = f"peer-{uuid.uuid4().hex[:6]}"
        (self._write_bulk if bulk else self._write_one_row)(tenant, self.rows)
        topic = self._topic("drain")
        tally = Tally(tenant, self.rows)
        watcher = Watcher(self.settings, topic, tally, self._decoder(publisher))
        began = time.time()
        publisher.start(topic)
        meter = CpuMeter({"publisher": publisher.pid(), "postgres": self.db.pid()})
        meter.start()
        try:
            watcher.wait(lambda t: t.distinct >= t.rows, 600, f"{publisher.name} drain")
        finally:
            cpu = meter.per(1)
            publisher.stop()
            watcher.close()
        span_s = max((tally.last_ms - tally.first_ms) / 1000, 1e-3)
        return Drain(self.rows / span_s, tally.first_ms / 1000 - began,
                     cpu["publisher"] / 1000, cpu["postgres"] / 1000,
                     meter.peak_rss_mb["publisher"])  # fmt: skip

    def steady(self, publisher: Publisher, rate: float, seconds: float) -> Steady:
        self._empty_outbox()
        publisher.before_backlog()
        topic = self._topic("latency")
        tenant = f"peer-{uuid.uuid4().hex[:6]}"
        tally = Tally(tenant, int(rate * seconds * 1.2) + 100)
        watcher = Watcher(self.settings, topic, tally, self._decoder(publisher))
        publisher.start(topic)
        try:
            self._probe_until_seen(watcher)
            time.sleep(1)  # past the probe: nothing of the start-up in the window
            meter = CpuMeter({"publisher": publisher.pid()})
            meter.start()
            sent = self._pace(tenant, rate, seconds)
            watcher.wait(lambda t: t.distinct >= sent, 120, f"{publisher.name} latency")
            cpu = meter.per(1)
        finally:
            publisher.stop()
            watcher.close()
        found = sorted(tally.latencies)
        return Steady(percentile(found, 50), percentile(found, 99), len(found),
                      cpu["publisher"] / 1000, meter.peak_rss_mb["publisher"])  # fmt: skip

    def killed(self, publisher: Publisher) -> Killed:
        self._empty_outbox()
        publisher.before_backlog()
        tenant = f"peer-{uuid.uuid4().hex[:6]}"
        self._write_one_row(tenant, self.rows)
        topic = self._topic("kill")
        tally = Tally(tenant, self.rows)
        watcher = Watcher(self.settings, topic, tally, self._decoder(publisher))
        publisher.start(topic)
        try:
            watcher.wait(lambda t: t.distinct >= t.rows // 2, 600, f"{publisher.name} first half")
            publisher.kill()
            killed_at = time.monotonic()
            publisher.resume()
            watcher.wait(lambda t: t.distinct >= t.rows, 600, f"{publisher.name} after the kill")
            recovered = time.monotonic() - killed_at
            watcher.wait_quiet(5.0)  # late replays of a restarted publisher
        finally:
            publisher.stop()
            watcher.close()
        return Killed(tally.duplicates, tally.reorders, recovered)

    def run_once(self, publisher: Publisher, rate: float, seconds: float) -> Outcome:
        say = self.progress
        say(f"  {publisher.name}: drain of {self.rows:,} one-row transactions…")
        one_row = self.drain(publisher, bulk=False)
        say(f"    {one_row.events_per_s:,.0f} events/s")
        say(f"  {publisher.name}: drain of one {self.rows:,}-row transaction…")
        bulk = self.drain(publisher, bulk=True)
        say(f"    {bulk.events_per_s:,.0f} events/s")
        say(f"  {publisher.name}: commit -> broker append at {rate:,.0f}/s for {seconds:.0f} s…")
        steady = self.steady(publisher, rate, seconds)
        say(f"    p50 {steady.p50_ms:.1f} ms, p99 {steady.p99_ms:.1f} ms")
        say(f"  {publisher.name}: SIGKILL half-way through {self.rows:,} rows…")
        killed = self.killed(publisher)
        say(f"    {killed.duplicates:,} duplicates, {killed.reorders:,} reorders")
        return Outcome(one_row, bulk, steady, killed)


def runs(
    stack: LocalStack, settings: HandoffSettings, rows: int, rate: float, seconds: float,
    count: int, progress: Callable[[str], None],
) -> dict[str, list[Outcome]]:  # fmt: skip
    """``count`` runs of every scenario for both publishers; everything removed after."""
    peer = Peer(stack, settings, rows, progress)
    measured: dict[str, list[Outcome]] = {}
    try:
        peer.prepare()
        for n in range(1, count + 1):
            progress(f"[bold]run {n} of {count}[/bold]")
            for publisher in peer.publishers():
                measured.setdefault(publisher.name, []).append(
                    peer.run_once(publisher, rate, seconds)
                )
    finally:
        peer.close()
    return measured


def _spread(values: list[float], fmt: str) -> str:
    middle = statistics.median(values)
    if len(values) == 1:
        return format(middle, fmt)
    return f"{format(middle, fmt)} ({format(min(values), fmt)} to {format(max(values), fmt)})"


def table(measured: dict[str, list[Outcome]], rows: int, rate: float) -> str:
    """Median (range) of every figure, the relay beside Debezium, and their ratio."""
    relay, debezium = measured["handoff relay"], measured["Debezium"]

    def line(label: str, pick: Callable[[Outcome], float], fmt: str,
             ratio: bool = True) -> list[object]:  # fmt: skip
        ours, theirs = [pick(o) for o in relay], [pick(o) for o in debezium]
        middle = statistics.median(theirs)
        times = f"{statistics.median(ours) / middle:.2g}x" if ratio and middle else ""
        return [label, _spread(ours, fmt), _spread(theirs, fmt), times]

    def cpu(d: Drain) -> float:
        return d.cpu_s + d.pg_cpu_s

    n, at = f"{rows:,}", f"at {rate:,.0f}/s"
    lines = [
        line(f"drain, {n} one-row transactions (events/s)", lambda o: o.one_row.events_per_s,
             ",.0f"),
        line(f"drain, one {n}-row transaction (events/s)", lambda o: o.bulk.events_per_s, ",.0f"),
        line("start -> first event on the topic (s)", lambda o: o.one_row.start_s, ".1f"),
        line("CPU s of the one-row drain from start, publisher", lambda o: o.one_row.cpu_s, ".1f"),
        line("the same, PostgreSQL", lambda o: o.one_row.pg_cpu_s, ".1f"),
        line("the same, both", lambda o: cpu(o.one_row), ".1f"),
        line(f"commit -> broker append p50 {at} (ms)", lambda o: o.steady.p50_ms, ".1f"),
        line(f"commit -> broker append p99 {at} (ms)", lambda o: o.steady.p99_ms, ".1f"),
        line(f"CPU s of the publisher {at}", lambda o: o.steady.cpu_s, ".1f"),
        line("peak RSS of the publisher (MB)",
             lambda o: max(o.one_row.rss_mb, o.bulk.rss_mb, o.steady.rss_mb), ",.0f"),
        line(f"duplicates after a SIGKILL half-way ({n} rows)",
             lambda o: o.killed.duplicates, ",.0f", ratio=False),
        line("per-key reorders after it", lambda o: o.killed.reorders, ",.0f", ratio=False),
        line("kill -> all rows on the topic (s)", lambda o: o.killed.recovered_s, ".1f"),
    ]  # fmt: skip
    runs_note = f"median of {len(relay)} run{'s' if len(relay) != 1 else ''} (range)"
    headers = [f"measure, {runs_note}", "handoff relay", "Debezium", "relay ÷ Debezium"]
    return markdown_table(headers, lines) + "\n\n" + CAVEATS


def as_json(measured: dict[str, list[Outcome]]) -> dict[str, Any]:
    from dataclasses import asdict

    return {name: [asdict(o) for o in outcomes] for name, outcomes in measured.items()}
