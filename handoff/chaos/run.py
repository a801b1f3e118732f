"""A chaos run from start to verdict: the pipeline up, load and kills, drain, proof."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from rich.console import Console
from rich.table import Table

from handoff.chaos.faults import FaultFigures, Killer
from handoff.chaos.load import LoadFigures, LoadGenerator
from handoff.chaos.pipeline import Pipeline
from handoff.chaos.plan import ChaosPlan
from handoff.chaos.verdict import Verdict, drained, judge
from handoff.core.errors import ConfigurationError, StackError
from handoff.core.settings import HandoffSettings
from handoff.deploy.supervisor import Supervisor
from handoff.operate.rebalance import refuse_unmovable
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.stack.postgres import APP_DB
from handoff.stack.procs import wait_until

# Payment faults the provider injects, in turn: an answer lost after the charge,
# a 503 before it, and an answer slower than the executors' timeout.
PROVIDER_FAULTS = (
    {"kind": "drop"},
    {"kind": "error"},
    {"kind": "delay", "delayMs": 4500},
)


@dataclass
class ChaosReport:
    plan: ChaosPlan
    tenant: str
    load: LoadFigures
    faults: FaultFigures
    verdict: Verdict
    provider_faults: int
    drain_s: float | None  # None: the pipeline did not drain in time
    folder: Path

    @property
    def ok(self) -> bool:
        return self.verdict.ok and self.drain_s is not None

    def table(self) -> Table:
        v, f = self.verdict, self.faults
        table = Table(title=f"handoff chaos: tenant {self.tenant}", show_header=False)
        table.add_column("measure")
        table.add_column("value")
        kills = ", ".join(f"{k} {n}" for k, n in sorted(f.kills.items())) or "none"
        failovers = ", ".join(f"{s:.1f} s" for s in f.failover_s)
        rows = [
            ("documents", f"{v.documents} ({len(self.load.poison)} planted poison)"),
            ("kills", kills),
            ("failovers (loss → new primary)", f"{f.failovers}" + (f" ({failovers})" if failovers
                                                                   else "")),
            *([("shards moved (each call)", ", ".join(f"{what} {s:.1f} s" for what, s in f.moves))]
              if f.moves else []),
            ("provider faults armed", str(self.provider_faults)),
            ("creates retried (same event id)", f"{self.load.retries} attempts, "
                                                f"{self.load.replayed} answered with the stored "
                                                "receipt"),
            ("longest the API did not accept a create", f"{self.load.longest_refusal_s:.1f} s"),
            ("drained after the last fault", "did not drain" if self.drain_s is None
                                             else f"{self.drain_s:.1f} s"),
            ("lost", str(v.lost)),
            ("doubled", str(v.doubled)),
            ("audit", "ok" if not v.audit_breaches else
                      f"{v.audit_breaches} breaches ({', '.join(v.audit_failed)})"),
            ("verdict", "[green]held[/green]" if self.ok else "[red]BREACHED[/red]"),
        ]  # fmt: skip
        for name, value in rows:
            table.add_row(name, value)
        return table


def _check_stack(stack: LocalStack, plan: ChaosPlan) -> None:
    if "primary" in plan.kinds and stack.cluster is None:
        raise ConfigurationError(
            "killing the primary needs a PostgreSQL cluster: run chaos in a clustered home "
            "(HANDOFF_HOME=<new folder> handoff stack up --pg-nodes 2 --brokers 3, then "
            "handoff db upgrade), or leave primary out of --kinds"
        )
    for kind in {"move", "rebalance"} & set(plan.kinds):
        if stack.citus is None or len(stack.citus.workers) < 2:
            raise ConfigurationError(
                f"a {kind} needs a Citus stack of two workers or more (HANDOFF_HOME=<new "
                f"folder> handoff stack up --citus 2, then handoff db upgrade), or leave {kind} "
                "out of --kinds"
            )
    if "broker" in plan.kinds and len(stack.brokers) < 3:
        raise ConfigurationError(
            "killing a broker needs three (handoff stack up --brokers 3 in a new home), "
            "or leave broker out of --kinds"
        )
    down = [s.name for s in stack.status() if not s.healthy]
    if down:
        raise StackError(f"the stack is not healthy ({', '.join(down)}): handoff stack up first")
    if {"move", "rebalance"} & set(plan.kinds) and stack.citus is not None:
        # Before any load (and once the stack answers): a move Citus refuses would end
        # the run part-way.
        group_of = None if "rebalance" in plan.kinds else "handoff.document_state"
        with psycopg.connect(stack.citus.coordinator.node_url(APP_DB)) as conn:
            refuse_unmovable(conn, group_of)


def _wait_healthy(url: str, what: str, timeout_s: float = 120) -> None:
    def answers() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    if not wait_until(answers, timeout_s, 0.5):
        raise StackError(f"the chaos run's {what} did not answer within {timeout_s:.0f} s")


def _arm_provider_faults(pipeline: Pipeline, plan: ChaosPlan, load: LoadGenerator) -> int:
    """Faults for a share of the documents' payments, matched by reference."""
    count = int(plan.documents * plan.provider_faults)
    picks = [n for n in range(plan.documents) if n not in load.poison]
    chosen = load.rng.sample(picks, min(count, len(picks)))
    with httpx.Client(base_url=pipeline.sandbox_url, timeout=10) as http:
        for i, n in enumerate(chosen):
            fault = {**PROVIDER_FAULTS[i % len(PROVIDER_FAULTS)], "reference": load.document_id(n)}
            http.post("/_sandbox/faults", json=fault).raise_for_status()
    return len(chosen)


def run_chaos(
    plan: ChaosPlan, stack: LocalStack, settings: HandoffSettings, console: Console
) -> ChaosReport:
    _check_stack(stack, plan)
    say = console.print
    home = stack.layout.home
    api_port = pick_port(18900, set())
    sandbox_port = pick_port(18950, {api_port})
    pipeline = Pipeline.register(settings, api_port=api_port, sandbox_port=sandbox_port)
    folder = home / "chaos" / pipeline.tenant
    folder.mkdir(parents=True, exist_ok=True)
    say(f"chaos run {pipeline.tenant}: {plan.describe()}")
    say(f"process logs in {folder / 'logs'}")
    supervisor = Supervisor(pipeline.deployment(settings, home, folder), folder / "logs",
                            lambda *_: None)  # fmt: skip
    supervising = threading.Thread(target=supervisor.run, name="chaos-supervisor", daemon=True)
    supervising.start()
    stop = threading.Event()
    killer: Killer | None = None
    try:
        _wait_healthy(pipeline.sandbox_url, "sandbox provider")
        _wait_healthy(pipeline.api_url, "API")
        load = LoadGenerator(pipeline.api_url, pipeline.credentials["intake"],
                             documents=plan.documents, rate=plan.rate, poison=plan.poison,
                             seed=plan.seed, stop=stop)  # fmt: skip
        armed = _arm_provider_faults(pipeline, plan, load)
        killer = Killer(supervisor, stack, pipeline.topic, plan.seed, say, pipeline.tenant,
                        settings)  # fmt: skip
        creating = threading.Thread(target=load.run, name="chaos-load", daemon=True)
        began = time.monotonic()
        creating.start()
        for kill in plan.kills:
            wait = began + kill.at_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            say(f"[{time.monotonic() - began:6.1f} s] {load.created}/{plan.documents} created; "
                f"kill {kill.kind}")  # fmt: skip
            killer.apply(kill)
        killer.restore()  # a worker the run added is drained and removed, under load still
        creating.join()
        if not killer.figures.last_fault_at:
            killer.figures.last_fault_at = time.monotonic()
        say(f"[{time.monotonic() - began:6.1f} s] all {load.created} created; draining…")
        drain_s = _drain(settings, pipeline.tenant, load.figures.poison, plan,
                         killer.figures.last_fault_at)  # fmt: skip
        verdict = judge(settings, pipeline.tenant, pipeline.topic, pipeline.sandbox_url,
                        load.figures.receipts, load.figures.poison, say)  # fmt: skip
    finally:
        stop.set()
        if killer is not None:
            with contextlib.suppress(Exception):  # the run's own error is the one to show
                killer.restore()  # a worker a rebalance added, even when the run failed
        supervisor.stop()
        supervising.join(120)
    return ChaosReport(plan, pipeline.tenant, load.figures, killer.figures, verdict, armed,
                       drain_s, folder)  # fmt: skip


def _drain(
    settings: HandoffSettings, tenant: str, poison: set[str], plan: ChaosPlan, since: float
) -> float | None:
    """Seconds from the last fault until everything is final; None after the timeout."""

    def done() -> bool:
        try:
            with psycopg.connect(settings.database_url, autocommit=True, connect_timeout=5) as c:
                return drained(c, tenant, poison)
        except psycopg.OperationalError:
            return False

    if not wait_until(done, plan.drain_timeout_s, 1.0):
        return None
    return time.monotonic() - since


def report_json(report: ChaosReport) -> dict[str, Any]:
    v, f = report.verdict, report.faults
    return {
        "tenant": report.tenant,
        "documents": v.documents,
        "poison": len(report.load.poison),
        "kills": dict(f.kills),
        "failovers": f.failovers,
        "failoverSeconds": [round(s, 1) for s in f.failover_s],
        "moves": [{"kind": what, "seconds": round(s, 2)} for what, s in f.moves],
        "providerFaults": report.provider_faults,
        "retries": report.load.retries,
        "replayed": report.load.replayed,
        "longestRefusalSeconds": round(report.load.longest_refusal_s, 1),
        "drainSeconds": None if report.drain_s is None else round(report.drain_s, 1),
        "lost": v.lost,
        "doubled": v.doubled,
        "breaches": v.breaches() + ([] if report.drain_s is not None else ["did not drain"]),
        "ok": report.ok,
    }
