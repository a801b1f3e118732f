"""Hop latency, taken apart: where the time from one emit to the next handler's commit goes.

A creator emits documents at a steady rate; ``handoff relay`` publishes
them (with its timing headers, ``HANDOFF_RELAY_TRACE_TIMING``) to a topic
whose records carry the broker's append time; ``handoff consume`` runs the
benchmark app (benchmarks/consumer_app.py), whose handler hands each
document on and records every mark of its hop. Segments, per handoff:

    emit commit -> relay fetch -> produce -> broker append -> consumer poll
    -> unit start -> unit commit

"emit commit" is the pacer's clock when its emit (an autocommit statement)
returned; the emit itself, from its ``occurredAt`` (the transaction's
``now()``) to that commit, is a segment of its own beside the hop. "unit
commit" is the consumer's clock after its commit returned. All clocks are
this machine's one clock (the broker's in milliseconds).

The CPU the whole system spends per hop is the CPU time each part's
processes used during the run (PostgreSQL's postmaster and its children,
the Kafka broker, the schema registry, the relay, the consumer, this
process's pacer), divided by the handoffs; the machine's whole busy time
is beside it, which includes anything else running.
"""

from __future__ import annotations

import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import psycopg

from benchmarks.stats import markdown_table, peak_rss, percentile
from handoff.core.emit_sql import SET_TRACE
from handoff.core.settings import HandoffSettings

if TYPE_CHECKING:  # consumer.py imports this module
    from benchmarks.consumer import Bench
    from handoff.stack.local import LocalStack

# The hop consumer's batch limit. A batch is what is buffered when the
# consumer looks (one event at a time when it keeps up); the limit matters
# when it falls behind: 10 was measured to fall behind for good on this
# 2-core machine (the relay, the pacer, PostgreSQL and Kafka share it),
# while 100 catches up, the units' fixed cost being shared by more events.
HOP_BATCH = 100

# (label, later mark, earlier mark): the marks are columns of the query below.
SEGMENTS = (
    ("emit commit -> relay fetch", "fetched", "emitted"),
    ("relay fetch -> produce", "produced", "fetched"),
    ("produce -> broker append", "appended", "produced"),
    ("broker append -> consumer poll", "received", "appended"),
    ("consumer poll -> unit start", "started", "received"),
    ("unit start -> unit commit", "committed", "started"),
)

MARKS = """
SELECT event_id, (extract(epoch FROM occurred_at) * 1000)::float8, fetched_us / 1000.0::float8,
       produced_us / 1000.0::float8, appended_ms::float8, received_at * 1000, started_at * 1000,
       (extract(epoch FROM done_at) * 1000)::float8
  FROM handoff_bench.effects
 WHERE tenant_id = %s AND consumer = 'bench-hop' AND event_id NOT LIKE 'warm%%'
"""

CREATE_ONE = """
SELECT handoff.emit_direct('create', %(prefix)s || 'e-' || %(n)s, 'created',
                           %(prefix)s || 'doc-' || %(n)s, NULL, NULL, %(owner)s, 'new',
                           NULL, NULL, '{"amount": 1}'::jsonb, NULL, NULL)
"""


@dataclass
class Segment:
    label: str
    p50_ms: float
    p99_ms: float


@dataclass
class HopRun:
    rate: float
    handoffs: int
    p50_ms: float
    p99_ms: float
    rss_mb: float
    segments: list[Segment] = field(default_factory=list)
    cpu_ms: dict[str, float] = field(default_factory=dict)  # per hop, by part; "machine"


class CpuMeter:
    """CPU seconds of named process trees over a window, sampled every ``every_s``, and
    the largest resident memory each tree had at a sample (``peak_rss_mb``).

    Sampled, not read twice: a process that ends inside the window (the
    pacer's database sessions close before the drain is over) keeps the CPU
    it used up to its last sample; one read at the end would not see it.
    """

    def __init__(self, roots: dict[str, int | None], every_s: float = 0.2) -> None:
        self.roots = {name: pid for name, pid in roots.items() if pid}
        self.every_s = every_s
        self._base: dict[int, float] = {}  # CPU at the window's start (0: started within)
        self._last: dict[int, tuple[str, float]] = {}  # part and CPU at its last sample
        self._machine: tuple[float, ...] = ()  # the machine's busy times at the start
        self.peak_rss_mb: dict[str, float] = dict.fromkeys(self.roots, 0.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        for name, pid in self.roots.items():
            try:
                root = psutil.Process(pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            rss = 0
            for proc in procs:
                try:
                    t = proc.cpu_times()
                    rss += proc.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
                self._last[proc.pid] = (name, t.user + t.system)
            self.peak_rss_mb[name] = max(self.peak_rss_mb[name], rss / 1e6)
        own = psutil.Process().cpu_times()  # this process's threads (the pacer), not children
        self._last[-1] = ("pacer", own.user + own.system)

    @staticmethod
    def _busy() -> tuple[float, ...]:
        """The machine's CPU seconds in each busy state (all but idle and iowait).

        Kept apart, not summed: each state's difference over the window is then
        exact when it did not move, where a difference of two sums of large
        counters came out a rounding error below zero in a window of a few ticks.
        """
        t = psutil.cpu_times()
        return tuple(getattr(t, name) for name in t._fields if name not in ("idle", "iowait"))

    def start(self) -> None:
        self._sample()
        self._base = {pid: cpu for pid, (_, cpu) in self._last.items()}
        self._machine = self._busy()

        def run() -> None:
            while not self._stop.wait(self.every_s):
                self._sample()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def per(self, count: int) -> dict[str, float]:
        """Milliseconds of CPU per ``count`` since start(), by part, and the machine's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        machine = sum(now - then for now, then in zip(self._busy(), self._machine, strict=True))
        used = {name: 0.0 for name in [*self.roots, "pacer"]}
        for pid, (name, cpu) in self._last.items():
            used[name] += cpu - self._base.get(pid, 0.0)
        used["sum of parts"] = sum(used.values())
        used["machine"] = machine
        return {name: seconds * 1000 / max(count, 1) for name, seconds in used.items()}


def stack_pids(stack: LocalStack) -> dict[str, int | None]:
    """The stack's parts whose CPU a hop spends: each part's main process."""
    return {part.name: part.pid() for part in stack.parts}


def runs(
    settings: HandoffSettings, home: Path, rate: float, seconds: float, count: int,
    pids: dict[str, int | None], progress: Callable[[str], None], lanes: int = 1,
) -> list[HopRun]:  # fmt: skip
    """``count`` hop runs, each with a new relay, consumer and topic; cleaned up after."""
    from benchmarks.consumer import Bench

    bench = Bench(settings, home, progress)
    bench.prepare()
    measured: list[HopRun] = []
    try:
        for n in range(1, count + 1):
            run = measure(bench, rate, seconds, pids, run=n, lanes=lanes)
            progress(
                f"  run {n}: {run.handoffs:,} handoffs, p50 {run.p50_ms:.1f} ms, "
                f"p99 {run.p99_ms:.1f} ms, {run.cpu_ms['machine']:.2f} CPU-ms per hop"
            )
            measured.append(run)
            with psycopg.connect(settings.database_url, autocommit=True) as conn:
                conn.execute("DELETE FROM handoff_bench.effects WHERE tenant_id = %s",
                             (bench.tenant,))  # fmt: skip
    finally:
        progress("  removing what the benchmark created…")
        bench.clean()
    return measured


def _spread(values: list[float], digits: int = 1) -> str:
    """The median of the runs, and their range."""
    middle = statistics.median(values)
    if len(values) == 1:
        return f"{middle:.{digits}f}"
    return f"{middle:.{digits}f} ({min(values):.{digits}f} to {max(values):.{digits}f})"


def tables(measured: list[HopRun]) -> list[str]:
    """Runs, segments (median of runs and range), CPU-ms per hop by part."""
    per_run = markdown_table(
        ["run", "handoffs/s", "handoffs", "p50 ms", "p99 ms", "peak RSS MB (consumer)",
         "CPU-ms per hop (machine)"],
        [[n, r.rate, r.handoffs, f"{r.p50_ms:.1f}", f"{r.p99_ms:.1f}", f"{r.rss_mb:.0f}",
          f"{r.cpu_ms['machine']:.2f}"] for n, r in enumerate(measured, 1)],
    )  # fmt: skip
    labels = [segment.label for segment in measured[0].segments]
    segments = markdown_table(
        ["segment", "p50 ms", "p99 ms"],
        [["emit commit -> unit commit (the hop)", _spread([r.p50_ms for r in measured]),
          _spread([r.p99_ms for r in measured])]]
        + [[label, _spread([r.segments[i].p50_ms for r in measured], 2),
            _spread([r.segments[i].p99_ms for r in measured], 2)]
           for i, label in enumerate(labels)],
    )  # fmt: skip
    parts = list(measured[0].cpu_ms)
    cpu = markdown_table(
        ["part", "CPU-ms per hop"],
        [[part, _spread([r.cpu_ms.get(part, float("nan")) for r in measured], 2)]
         for part in parts],
    )  # fmt: skip
    return [
        per_run,
        f"Segments, median of {len(measured)} runs (range):\n" + segments,
        "CPU per hop, median (range):\n" + cpu,
    ]


def measure(
    bench: Bench, rate: float, seconds: float, stack_pids: dict[str, int | None], run: int = 1,
    lanes: int = 1, env: dict[str, str] | None = None, traced: bool = False,
) -> HopRun:  # fmt: skip
    """One hop run: creates for bench-hop at ``rate``/s; bench-hop hands each to bench-next.

    ``env``: more settings for the relay and the consumer (the tracing benchmark's
    HANDOFF_OTEL_*); ``traced``: each create carries a sampled trace context of its own,
    as an API request that was traced would (benchmarks/tracing.py).
    """
    more = env or {}
    topic = bench.topic("hop", log_append_time=True)
    logs = bench.logs()
    trace = logs / f"bench-hop-{topic.rsplit('.', 1)[-1]}.trace"
    with (logs / "bench-consumer-relay.log").open("wb") as log:
        relay = subprocess.Popen(
            [sys.executable, "-m", "handoff.cli", "relay"],
            env=bench.env(
                HANDOFF_RELAY_DEFAULT_TOPIC=topic, HANDOFF_RELAY_TRACE_TIMING="true", **more
            ),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    with (logs / "bench-consumer-hop.log").open("wb") as log:  # the child keeps its copy
        hop = subprocess.Popen(
            [sys.executable, "-m", "handoff.cli", "consume", "benchmarks.consumer_app:app",
             "--topic", topic, "--batch-size", str(HOP_BATCH), "--concurrency", str(lanes)],
            env=bench.env(BENCH_CONSUMER="bench-hop", BENCH_NEXT="bench-next",
                          BENCH_TRACE=str(trace),
                          HANDOFF_CONSUMER_CREDENTIAL=bench.creds["bench-hop"].token, **more),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )  # fmt: skip
    peak = [0.0]
    watcher = threading.Thread(
        target=lambda: peak.__setitem__(0, peak_rss(hop, 0.2) / 1e6), daemon=True
    )
    watcher.start()
    meter = CpuMeter({**stack_pids, "relay": relay.pid, "consumer": hop.pid})
    try:
        with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
            applied = partial(bench.applied, conn, "bench-hop")

            # One handoff through the whole path first: the relay has its
            # slots and the consumer its partitions (a group's first join
            # on a fresh broker takes seconds), so the pace measures the
            # steady state, not a start-up backlog.
            _warm_up(bench, applied, run)
            meter.start()
            sent, emitted = _pace(bench, rate, seconds, run, traced)
            deadline = time.monotonic() + 120
            while applied() < sent + 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            cpu = meter.per(sent)
            rows = conn.execute(MARKS, (bench.tenant,)).fetchall()
    finally:
        for proc in (hop, relay):
            proc.send_signal(signal.SIGTERM)
        for proc in (hop, relay):
            proc.wait(60)
        watcher.join(5)
    if len(rows) != sent:
        raise RuntimeError(f"the hop consumer applied {len(rows)} of {sent} handoffs")
    commits = _commits(trace)
    trace.unlink(missing_ok=True)
    marks = [
        {"occurred": r[1], "emitted": emitted.get(r[0]), "fetched": r[2], "produced": r[3],
         "appended": r[4], "received": r[5], "started": r[6], "done": r[7],
         "committed": commits.get(r[0])}
        for r in rows
    ]  # fmt: skip
    missing = [m for m in marks if m["committed"] is None or m["emitted"] is None]
    if missing:
        raise RuntimeError(f"{len(missing)} handoffs lack a commit mark (see {trace})")
    total = sorted(m["committed"] - m["emitted"] for m in marks)
    segments = [Segment(label, *_p50_p99(m[later] - m[earlier] for m in marks))
                for label, later, earlier in SEGMENTS]  # fmt: skip
    segments.append(Segment("the emit (occurredAt -> its commit)", *_p50_p99(
        m["emitted"] - m["occurred"] for m in marks)))  # fmt: skip
    # The hop as `bench consumer` has always reported it (occurredAt to the handler's
    # effect, just before the commit), so that figures stay comparable with earlier ones.
    segments.append(Segment("occurredAt -> handler's effect (bench consumer's hop)", *_p50_p99(
        m["done"] - m["occurred"] for m in marks)))  # fmt: skip
    return HopRun(sent / seconds, sent, percentile(total, 50), percentile(total, 99), peak[0],
                  segments, cpu)  # fmt: skip


def _p50_p99(values: Iterable[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return percentile(ordered, 50), percentile(ordered, 99)


def _commits(trace: Path) -> dict[str, float]:
    """Event id -> the consumer's clock (ms) when its unit's commit returned; the first."""
    found: dict[str, float] = {}
    for line in trace.read_text().splitlines():
        event_id, _, at = line.partition(" ")
        found.setdefault(event_id, float(at) * 1000)
    return found


def _warm_up(bench: Bench, applied: Callable[[], int], run: int) -> None:
    with psycopg.connect(bench.as_service("creator"), autocommit=True) as conn:
        conn.execute(CREATE_ONE, {"prefix": f"warm{run}-", "owner": "bench-hop", "n": 1})
    deadline = time.monotonic() + 120
    while applied() < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the hop consumer applied nothing in 120 s; see its log")
        time.sleep(0.1)


def _pace(
    bench: Bench, rate: float, seconds: float, run: int, traced: bool = False
) -> tuple[int, dict[str, float]]:
    """Creates at a steady ``rate`` from two threads: how many were sent, and each one's
    commit on this process's clock (ms), by event id. ``traced``: each in a transaction
    that sets a new sampled trace context first (core/emit_sql.py SET_TRACE)."""
    sent = [0, 0]
    emitted: dict[str, float] = {}

    def worker(index: int) -> None:
        interval = 2.0 / rate
        with psycopg.connect(bench.as_service("creator"), autocommit=True) as conn:
            began = time.perf_counter()
            n = 0
            while (due := began + n * interval) < began + seconds:
                if (wait := due - time.perf_counter()) > 0:
                    time.sleep(wait)
                prefix, number = f"hop{run}-{index}-", n * 2 + index
                create = {"prefix": prefix, "owner": "bench-hop", "n": number}
                if traced:
                    with conn.transaction():
                        conn.execute(SET_TRACE, {"traceparent": _new_traceparent()})
                        conn.execute(CREATE_ONE, create)
                else:
                    conn.execute(CREATE_ONE, create)
                emitted[f"{prefix}e-{number}"] = time.time() * 1000
                n += 1
            sent[index] = n

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(sent), emitted


def _new_traceparent() -> str:
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
