"""Effects completed per second through the ledger, against the sandbox provider
answering in 20 ms, with 1, 4 and 16 executors; and the time from an unknown outcome
to its reconciliation.

Each run records N intents (as the consumer's handlers would, in batches of
500 per transaction), starts ``handoff effects run --executors E`` and
times from the first claim to the last completion, from the ledger's own
history. Side by side, in the same run: a bare loop of E threads calling
the same provider with no ledger at all, the ceiling the provider's latency
sets. The reconciliation run drops the answers of some payments (the
provider's "drop" fault): each becomes unknown, and the time to its
reconciliation (lookup, then recorded) is read from the history.

Everything it creates goes at the end: the intents and their history, the
scratch tenant's service, the provider process and its records.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.conninfo import make_conninfo

from benchmarks.stats import percentile
from benchmarks.tenants import remove_tenant
from handoff.consumers.providers import SandboxPayments
from handoff.core.effects import intend
from handoff.core.identity import Credential
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings

Progress = Callable[[str], None]
CONSUMER = "bench-pay"
ROOT = Path(__file__).resolve().parents[1]

TIMING = """
SELECT count(*) FILTER (WHERE i.state = 'succeeded'),
       extract(epoch FROM max(i.completed_at) - min(c.first_claim)),
       array_agg(extract(epoch FROM i.completed_at - c.first_claim) * 1000)
  FROM handoff.effect_intents i
  JOIN LATERAL (SELECT min(at) AS first_claim FROM handoff.effect_history h
                 WHERE h.tenant_id = i.tenant_id AND h.intent_id = i.id
                   AND h.from_state = 'intended') c ON true
 WHERE i.tenant_id = %(tenant)s AND i.business_key LIKE %(run)s
"""

RECONCILED = """
SELECT extract(epoch FROM done.at - lost.at) * 1000
  FROM handoff.effect_intents i
  JOIN LATERAL (SELECT min(at) AS at FROM handoff.effect_history h
                 WHERE h.tenant_id = i.tenant_id AND h.intent_id = i.id
                   AND h.to_state = 'unknown') lost ON true
  JOIN LATERAL (SELECT min(at) AS at FROM handoff.effect_history h
                 WHERE h.tenant_id = i.tenant_id AND h.intent_id = i.id
                   AND h.to_state = 'succeeded') done ON true
 WHERE i.tenant_id = %(tenant)s AND i.business_key LIKE %(run)s
   AND i.reconciliation = 'reconciled'
"""


@dataclass
class Run:
    executors: int
    processes: int
    effects: int
    per_s: float
    bare_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass
class EffectsResult:
    latency_ms: int
    runs: list[Run]
    unknown: int
    reconciled: int
    reconcile_p50_ms: float
    reconcile_p99_ms: float
    reconcile_max_ms: float


class Bench:
    def __init__(self, settings: HandoffSettings, home: Path, progress: Progress) -> None:
        self.settings, self.home, self.say = settings, home, progress
        self.tenant = f"ebench-{uuid.uuid4().hex[:6]}"
        self.cred: Credential | None = None
        self.folder = Path(tempfile.mkdtemp(prefix="handoff-bench-sandbox-"))
        self.provider: subprocess.Popen[bytes] | None = None
        self.url = ""

    # -- set-up and clean-up ------------------------------------------------------------

    def prepare(self, latency_ms: int) -> None:
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            self.cred = add_service(conn, CONSUMER, tenant=self.tenant)
        with (self.folder / "sandbox.log").open("ab") as log:
            self.provider = subprocess.Popen(
                [sys.executable, "-m", "handoff.cli", "sandbox-provider", "--port", "0",
                 "--data", str(self.folder / "data"), "--latency-ms", str(latency_ms)],
                stdout=subprocess.PIPE, stderr=log,
            )  # fmt: skip
        assert self.provider.stdout is not None
        self.url = self.provider.stdout.readline().decode().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError(f"the sandbox provider did not start: {self.folder}/sandbox.log")

    def clean(self) -> None:
        if self.provider is not None:
            self.provider.terminate()
            self.provider.wait(20)
            if self.provider.stdout is not None:
                self.provider.stdout.close()
        remove_tenant(self.settings.database_url, self.tenant,
                      [CONSUMER] if self.cred is not None else [])  # fmt: skip
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- parts --------------------------------------------------------------------------

    def record(self, run: str, count: int) -> None:
        """``count`` intents, 500 per transaction, as handlers record them."""
        assert self.cred is not None
        info = make_conninfo(
            self.settings.database_url, user=self.cred.role, password=self.cred.secret
        )
        with psycopg.connect(info) as conn:
            for start in range(0, count, 500):
                with conn.transaction():
                    for n in range(start, min(start + 500, count)):
                        ref = f"{run}-{n}"
                        intend(
                            conn,
                            event_id=ref,
                            effect="pay",
                            document_id=ref,
                            run_id=1,
                            request={"amount": 100 + n, "currency": "EUR", "reference": ref},
                            business_key=f"{run}:{n}",
                        )

    def execute(self, run: str, count: int, executors: int, processes: int = 1, **env: str) -> None:
        """``handoff effects run`` with ``executors`` spread over ``processes`` processes,
        until the run's intents are settled."""
        assert self.cred is not None
        log = (self.home / "logs" / f"bench-effects-{run}.log").open("ab")
        environ = {**_environ(self.settings), "HANDOFF_CONSUMER_CREDENTIAL": self.cred.token,
                   "HANDOFF_SANDBOX_URL": self.url, **env}  # fmt: skip
        command = [sys.executable, "-m", "handoff.cli", "effects", "run",
                   "benchmarks.effects_app:app", "--executors"]  # fmt: skip
        procs = [
            subprocess.Popen(
                [*command, str(share)], env=environ, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )
            for share in _shares(executors, processes)
        ]
        try:
            with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
                deadline = time.monotonic() + 600
                while time.monotonic() < deadline:
                    row = conn.execute(
                        "SELECT count(*) FROM handoff.effect_intents WHERE tenant_id = %s "
                        "AND business_key LIKE %s AND state IN ('succeeded', 'failed')",
                        (self.tenant, f"{run}:%"),
                    ).fetchone()
                    if row is not None and row[0] >= count:
                        return
                    if any(proc.poll() is not None for proc in procs):
                        raise RuntimeError(f"executors exited: see {log.name}")
                    time.sleep(0.1)
                raise RuntimeError(f"{run}: intents not settled within 600 s")
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
            log.close()

    def timing(self, run: str) -> tuple[int, float, list[float]]:
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            row = conn.execute(TIMING, {"tenant": self.tenant, "run": f"{run}:%"}).fetchone()
        assert row is not None
        done, elapsed, each = row
        return int(done), float(elapsed or 0), sorted(float(v) for v in each or [])

    def bare(self, count: int, threads: int) -> float:
        """The same payments straight to the provider from ``threads`` threads: no ledger."""
        run = uuid.uuid4().hex[:6]
        client = SandboxPayments(self.url)
        next_index = iter(range(count))
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    n = next(next_index, None)
                if n is None:
                    return
                ref = f"bare-{run}-{n}"
                client.submit(ref, {"amount": 100, "currency": "EUR", "reference": ref})

        started = time.perf_counter()
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - started
        client.close()
        return count / elapsed

    def reconciliation(self, count: int, dropped: int, executors: int) -> list[float]:
        run = f"rec{uuid.uuid4().hex[:6]}"
        self.record(run, count)
        httpx.post(f"{self.url}/_sandbox/faults", json={"kind": "drop", "times": dropped},
                   timeout=10).raise_for_status()  # fmt: skip
        self.execute(run, count, executors)
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            rows = conn.execute(RECONCILED, {"tenant": self.tenant, "run": f"{run}:%"}).fetchall()
        return sorted(float(r[0]) for r in rows)


def _shares(executors: int, processes: int) -> list[int]:
    """``executors`` spread over ``processes`` as evenly as they go."""
    return [executors // processes + (1 if n < executors % processes else 0)
            for n in range(processes)]  # fmt: skip


def layouts(text: str) -> list[tuple[int, int]]:
    """``--executors``: "1,4,16" (one process each) or "16/2" (16 executors in 2
    processes); as (executors, processes)."""
    found = []
    for item in text.split(","):
        executors, _, processes = item.strip().partition("/")
        try:
            layout = (int(executors), int(processes or 1))
        except ValueError:
            raise ValueError(f"{item!r}: give executors, or executors/processes (16/2)") from None
        if not 1 <= layout[1] <= layout[0]:
            raise ValueError(f"{item!r}: from 1 process to one per executor")
        found.append(layout)
    return found


def _environ(settings: HandoffSettings) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "HANDOFF_DATABASE_URL": settings.database_url,
        "HANDOFF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "HANDOFF_SCHEMA_REGISTRY_URL": settings.schema_registry_url,
    }


def run(
    settings: HandoffSettings,
    home: Path,
    executor_counts: list[int] | list[tuple[int, int]],
    per_executor: int,
    latency_ms: int,
    progress: Progress,
) -> EffectsResult:
    bench = Bench(settings, home, progress)
    (home / "logs").mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    try:
        bench.prepare(latency_ms)
        progress(f"  sandbox provider at {bench.url}, answering in {latency_ms} ms")
        for layout in executor_counts:
            executors, processes = layout if isinstance(layout, tuple) else (layout, 1)
            count = max(per_executor * executors, 100)
            name = f"x{executors}p{processes}-{uuid.uuid4().hex[:4]}"
            progress(f"  {_label(executors, processes)}: {count:,} intents…")
            bench.record(name, count)
            bench.execute(name, count, executors, processes)
            done, elapsed, each = bench.timing(name)
            bare = bench.bare(count, executors)
            runs.append(
                Run(executors, processes, done, done / elapsed if elapsed else float("nan"),
                    bare, percentile(each, 50), percentile(each, 99))
            )  # fmt: skip
            progress(f"    {runs[-1].per_s:,.0f}/s through the ledger, {bare:,.0f}/s bare")
        total = max(per_executor * 4, 100)
        dropped = max(total // 4, 1)
        progress(f"  reconciliation: {dropped} of {total:,} answers dropped, 4 executors…")
        times = bench.reconciliation(total, dropped, 4)
    finally:
        progress("  removing what the benchmark created…")
        bench.clean()
    return EffectsResult(
        latency_ms, runs, dropped, len(times), percentile(times, 50), percentile(times, 99),
        times[-1] if times else float("nan"),
    )  # fmt: skip


def _label(executors: int, processes: int) -> str:
    where = f" in {processes} processes" if processes > 1 else ""
    return f"{executors} executor(s){where}"


def result_rows(r: EffectsResult) -> list[list[Any]]:
    rows: list[list[Any]] = [
        [_label(run.executors, run.processes), run.per_s, run.bare_per_s,
         f"{run.per_s / run.bare_per_s:.2f}x",
         f"{run.effects:,} effects; claim -> recorded p50 {run.p50_ms:.1f} ms, "
         f"p99 {run.p99_ms:.1f} ms"]
        for run in r.runs
    ]  # fmt: skip
    rows.append(
        ["unknown -> reconciled (4 executors)", "", "", "",
         f"{r.reconciled} of {r.unknown} lost answers; p50 {r.reconcile_p50_ms:.0f} ms, "
         f"p99 {r.reconcile_p99_ms:.0f} ms, max {r.reconcile_max_ms:.0f} ms"]
    )  # fmt: skip
    return rows
