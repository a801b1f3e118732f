"""What tracing costs: emits/s through the HTTP API and the hop (emit commit → the next
handler's commit), with tracing off, on with sampling 0, and on at 100 %, same run.

"On" exports to a real Zipkin server (handoff/stack/zipkin.py) with OpenTelemetry's
Zipkin exporter, so the 100 % figures include building, batching and sending every
span. Modes are interleaved, each round starting with the next one (off, 0, 100 %;
0, 100 %, off; …), so that a drift of the machine or of the tables falls on all three
alike; each figure is the median of the rounds with their range.

Emits: ``handoff serve`` started per mode, ``clients`` threads posting creates with no
``traceparent`` (at 100 % the API starts a sampled trace for each, and the emit runs in
a transaction that sets ``handoff.trace``; at 0 it starts an unsampled one and nothing
is stored). Hop: benchmarks/hop.py's run with the relay and the consumer under the
mode's settings; at 100 % each create carries a sampled context of its own, so the
relay publishes under a span and the consumer continues the trace.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

from benchmarks import hop, tracker
from benchmarks.consumer import Bench
from benchmarks.stats import markdown_table, percentile
from handoff.core.settings import HandoffSettings
from handoff.stack.zipkin import ZipkinServer

# The modes: a label and the sampling ratio of new traces (None: tracing off).
MODES: tuple[tuple[str, float | None], ...] = (
    ("off", None),
    ("on, sampling 0", 0.0),
    ("on, 100 %", 1.0),
)


@dataclass
class Round:
    mode: str
    emits_per_s: float
    emit_p50_ms: float
    emit_p99_ms: float
    hop_p50_ms: float
    hop_p99_ms: float
    cpu_ms_per_hop: float
    spans: int  # spans Zipkin received during the round


def _env(zipkin: ZipkinServer, ratio: float | None) -> dict[str, str]:
    if ratio is None:
        return {"HANDOFF_OTEL_EXPORTER": "none"}
    return zipkin.env(ratio)


def runs(
    settings: HandoffSettings, home: Path, cache_dir: Path, stack_pids: dict[str, int | None],
    seconds: float, clients: int, rate: float, rounds: int, progress: Callable[[str], None],
) -> list[Round]:  # fmt: skip
    """``rounds`` rounds of every mode; what the benchmark created removed after."""
    bench = Bench(settings, home, progress)
    measured: list[Round] = []
    with ZipkinServer(cache_dir, bench.logs() / "bench-zipkin.log") as zipkin:
        bench.prepare()
        try:
            for n in range(1, rounds + 1):
                # Each round starts with the next mode, so that none always runs
                # first (a fresh tenant) or last (after the others' rows).
                for m in ((n - 1 + k) % len(MODES) for k in range(len(MODES))):
                    mode, ratio = MODES[m]
                    env = _env(zipkin, ratio)
                    before = zipkin.span_count()
                    # The emits first, then the hop: the emits' rows are published by this
                    # mode's own relay (under its settings: a traced row continues its
                    # trace) before the hop's warm-up handoff, outside the measured hops.
                    count, latencies = _emits(bench, env, seconds, clients, f"r{n}m{m}")
                    run = hop.measure(bench, rate, seconds, stack_pids, run=len(measured) + 1,
                                      env=env, traced=ratio == 1.0)  # fmt: skip
                    with psycopg.connect(settings.database_url, autocommit=True) as conn:
                        conn.execute("DELETE FROM handoff_bench.effects WHERE tenant_id = %s",
                                     (bench.tenant,))  # fmt: skip
                    latencies.sort()
                    time.sleep(0.5)  # the last batch of spans exported (every 200 ms)
                    measured.append(Round(
                        mode, count / seconds, percentile(latencies, 50),
                        percentile(latencies, 99), run.p50_ms, run.p99_ms,
                        run.cpu_ms["machine"], zipkin.span_count() - before,
                    ))  # fmt: skip
                    r = measured[-1]
                    progress(
                        f"  round {n}, tracing {mode}: {r.emits_per_s:,.0f} emits/s, "
                        f"hop p50 {r.hop_p50_ms:.1f} ms p99 {r.hop_p99_ms:.1f} ms, "
                        f"{r.spans:,} spans"
                    )
        finally:
            progress("  removing what the benchmark created…")
            bench.clean()
    return measured


def _emits(
    bench: Bench, env: dict[str, str], seconds: float, clients: int, tag: str
) -> tuple[int, list[float]]:
    """Creates through a ``handoff serve`` of this mode for ``seconds``, from ``clients``
    threads: how many were accepted, and each one's latency (ms)."""
    with tracker.served(bench.home, **env) as url:
        token = bench.creds["creator"].token
        latencies: list[list[float]] = [[] for _ in range(clients)]
        failed: list[str] = []
        start = threading.Barrier(clients)

        def client(index: int) -> None:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                              timeout=30) as http:  # fmt: skip
                # Warm: a connection and the server's pool, outside the clock.
                _create(http, f"{tag}-{index}-warm", failed)
                start.wait()
                ends = time.perf_counter() + seconds
                n = 0
                while (began := time.perf_counter()) < ends:
                    _create(http, f"{tag}-{index}-{n}", failed)
                    latencies[index].append((time.perf_counter() - began) * 1000)
                    n += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failed:
            raise RuntimeError(f"{len(failed)} creates failed, the first: {failed[0]}")
        every = [ms for per in latencies for ms in per]
        return len(every), every


def _create(http: httpx.Client, key: str, failed: list[str]) -> None:
    answer = http.post("/v1/documents", json={
        "eventId": f"e-{key}", "documentId": f"d-{key}", "owner": "bench-next", "status": "new",
    })  # fmt: skip
    if answer.status_code != 201:
        failed.append(f"{answer.status_code} {answer.text[:200]}")


def _spread(values: list[float], digits: int = 1) -> str:
    middle = statistics.median(values)
    if len(values) == 1:
        return f"{middle:,.{digits}f}"
    return f"{middle:,.{digits}f} ({min(values):,.{digits}f} to {max(values):,.{digits}f})"


def table(measured: list[Round], clients: int, rate: float) -> str:
    """One row per mode: medians of its rounds with their ranges, emits/s against off."""
    off = statistics.median(r.emits_per_s for r in measured if r.mode == MODES[0][0])
    rows = []
    for mode, _ in MODES:
        mine = [r for r in measured if r.mode == mode]
        emits = statistics.median(r.emits_per_s for r in mine)
        rows.append([
            mode, _spread([r.emits_per_s for r in mine], 0), f"{emits / off:.2f}x",
            _spread([r.emit_p99_ms for r in mine]), _spread([r.hop_p50_ms for r in mine]),
            _spread([r.hop_p99_ms for r in mine]), _spread([r.cpu_ms_per_hop for r in mine], 2),
            f"{statistics.median(r.spans for r in mine):,.0f}",
        ])  # fmt: skip
    return markdown_table(
        ["tracing", f"emits/s (HTTP, {clients} clients)", "vs off", "emit p99 ms",
         f"hop p50 ms at {rate:,.0f}/s", "hop p99 ms", "CPU-ms per hop", "spans per round"],
        rows,
    )  # fmt: skip
