"""``make bench``'s emit: the emit transaction beside pgbench's tpcb-like on the same
server, driven by pgbench's C client and by the Python emitter, with PostgreSQL's CPU per
transaction, and the deadline counters' cost; its tables."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from functools import partial

from rich.console import Console

from benchmarks import emit, emit_pgbench, hop, pgbench
from benchmarks.stats import markdown_table
from benchmarks.tenants import remove_tenant
from handoff.core.settings import HandoffSettings, load_settings
from handoff.stack.local import LocalStack


def run(seconds: float, client_counts: list[int], console: Console) -> str:
    """Emit vs pgbench tpcb-like, same server, same client counts, one run.

    Two drivers for the emit transaction: pgbench's C client running the
    emit function (the database side alone, as tpcb-like is measured), and
    the Python emitter the product uses (adds the client's own CPU, which
    shares this machine's cores with the server).
    """
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    superuser = stack.postgres.superuser_url()
    console.print(f"[bold]emit[/bold]: preparing pgbench (scale {max(client_counts)})…")
    pgbench.prepare(superuser, scale=max(client_counts))
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    tokens = emit.register_owners(settings.database_url, tenant)
    try:
        return _runs(stack, settings, superuser, tenant, tokens, client_counts, seconds, console)
    finally:
        remove_tenant(settings.database_url, tenant, tokens)


def _runs(
    stack: LocalStack, settings: HandoffSettings, superuser: str, tenant: str,
    tokens: dict[str, str], client_counts: list[int], seconds: float, console: Console,
) -> str:  # fmt: skip
    rows = []
    due_rows: list[list[object]] = []
    cpu_rows: list[list[object]] = []
    raw = []
    secs = int(seconds)
    postgres = hop.stack_pids(stack)["postgres"]

    def metered(run: Callable[[], pgbench.PgbenchResult]) -> tuple[pgbench.PgbenchResult, float]:
        """A pgbench run and PostgreSQL's CPU-ms per transaction in it (both drivers are
        pgbench's C client, so the server's share is compared alone)."""
        meter = hop.CpuMeter({"postgres": postgres})
        meter.start()
        result = run()
        return result, meter.per(round(result.tps * secs))["postgres"]

    for clients in client_counts:
        console.print(f"  {clients} clients: tpcb-like…", end="")
        tpcb, tpcb_cpu = metered(partial(pgbench.run, superuser, clients, secs))
        console.print(f" {tpcb.tps:,.0f}; emit via pgbench…", end="")
        pg_uniform, emit_cpu = metered(
            partial(
                emit_pgbench.run, settings.database_url, tenant, tokens, "uniform", clients, secs
            )
        )
        pg_hot = emit_pgbench.run(settings.database_url, tenant, tokens, "hot", clients, secs)
        pg_due = emit_pgbench.run(
            settings.database_url, tenant, tokens, "uniform-due", clients, secs
        )
        pg_hot_due = emit_pgbench.run(
            settings.database_url, tenant, tokens, "hot-due", clients, secs
        )
        console.print(
            f" {pg_uniform.tps:,.0f}/{pg_hot.tps:,.0f}, with deadlines "
            f"{pg_due.tps:,.0f}/{pg_hot_due.tps:,.0f}; via Python…",
            end="",
        )
        due_rows.append(
            [
                clients,
                pg_uniform.tps,
                pg_due.tps,
                f"{pg_due.tps / pg_uniform.tps:.2f}x",
                pg_hot.tps,
                pg_hot_due.tps,
                f"{pg_hot_due.tps / pg_hot.tps:.2f}x",
                f"{pg_due.p99_ms:.2f} / {pg_hot_due.p99_ms:.2f}",
            ]
        )
        py_uniform = emit.run(settings.database_url, tokens, "uniform", clients, seconds)
        py_hot = emit.run(settings.database_url, tokens, "hot", clients, seconds)
        console.print(f" {py_uniform.accepted_per_s:,.0f}/{py_hot.accepted_per_s:,.0f}")
        raw.append(
            {
                "clients": clients,
                "postgres_cpu_ms": {"tpcb": tpcb_cpu, "emit_pgbench_uniform": emit_cpu},
                "tpcb": asdict(tpcb),
                "emit_pgbench_uniform": asdict(pg_uniform),
                "emit_pgbench_hot": asdict(pg_hot),
                "emit_pgbench_uniform_due": asdict(pg_due),
                "emit_pgbench_hot_due": asdict(pg_hot_due),
                "emit_python_uniform": asdict(py_uniform),
                "emit_python_hot": asdict(py_hot),
            }
        )
        cpu_rows.append(
            [clients, f"{tpcb_cpu:.3f}", f"{emit_cpu:.3f}", f"{tpcb_cpu / emit_cpu:.2f}x"]
        )
        # pgbench stops with an error if any transaction fails (run_script raises)
        for driver, uniform, hot, failed in (
            ("pgbench", (pg_uniform.tps, pg_uniform.p50_ms, pg_uniform.p99_ms),
             (pg_hot.tps, pg_hot.p50_ms, pg_hot.p99_ms), 0),
            ("python", (py_uniform.accepted_per_s, py_uniform.p50_ms, py_uniform.p99_ms),
             (py_hot.accepted_per_s, py_hot.p50_ms, py_hot.p99_ms),
             py_uniform.errors + py_hot.errors),
        ):  # fmt: skip
            rows.append(
                [
                    clients,
                    driver,
                    tpcb.tps,
                    uniform[0],
                    hot[0],
                    f"{uniform[0] / tpcb.tps:.2f}x",
                    f"{hot[0] / uniform[0]:.2f}x",
                    f"{uniform[1]:.2f} / {uniform[2]:.2f}",
                    f"{hot[1]:.2f} / {hot[2]:.2f}",
                    f"{tpcb.p50_ms:.2f} / {tpcb.p99_ms:.2f}",
                    failed,
                ]
            )
    table = markdown_table(
        [
            "clients",
            "emit driver",
            "tpcb-like tps",
            "uniform/s",
            "hot/s",
            "uniform÷tpcb",
            "hot÷uniform",
            "uniform p50/p99 ms",
            "hot p50/p99 ms",
            "tpcb p50/p99 ms",
            "failed",
        ],
        rows,
    )
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"emit-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(raw, indent=2))
    deadlines = markdown_table(
        [
            "clients",
            "uniform/s",
            "uniform+deadline/s",
            "ratio",
            "hot/s",
            "hot+deadline/s",
            "ratio",
            "+deadline p99 ms (uniform / hot)",
        ],
        due_rows,
    )
    cpu = markdown_table(["clients", "tpcb-like", "emit (uniform)", "tpcb-like ÷ emit"], cpu_rows)
    return (
        table
        + "\n\nPostgreSQL's CPU-ms per transaction (pgbench driver, sampled from its processes):\n"
        + cpu
        + "\n\nWith a deadline on every handoff (pgbench driver; the deadline counters):\n"
        + deadlines
    )
