"""``handoff chaos``: kill processes and nodes under load, then prove nothing was lost."""

from __future__ import annotations

import json
import signal
import sys
from typing import Annotated

import typer

from handoff.cli._common import console


def chaos(
    for_s: Annotated[
        float, typer.Option("--for", help="Seconds of load and kills (the drain comes after).")
    ] = 180.0,
    rate: Annotated[float, typer.Option(help="Documents created per second.")] = 8.0,
    every: Annotated[float, typer.Option(help="Mean seconds between kills.")] = 15.0,
    seed: Annotated[int, typer.Option(help="Seed of the kill schedule and the load.")] = 1,
    kinds: Annotated[
        str,
        typer.Option(
            help="What may be killed, comma-separated: relay, consumer, executor, "
            "api, broker, primary; and on a Citus stack, move (the run's tenant moved to "
            "another worker under load) and rebalance (a worker added and the shards "
            "rebalanced onto it; the next time, and at the end, drained and removed)."
        ),
    ] = "relay,consumer,executor,api,broker,primary",
    poison: Annotated[int, typer.Option(help="Documents planted to be quarantined.")] = 3,
    drain_timeout: Annotated[
        float, typer.Option(help="Longest wait for the pipeline to drain after the load.")
    ] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help="The figures as JSON on stdout.")] = False,
) -> None:
    """Run the invoice pipeline on the clustered stack while relays, consumers, executors,
    the API, a broker and the PostgreSQL primary are killed (on a Citus stack: while the
    tenant's shards move between workers); exit 1 if anything was lost, doubled, left
    unfinished or quarantined beyond the planted poison."""
    from handoff.chaos.plan import ChaosPlan
    from handoff.chaos.run import report_json, run_chaos
    from handoff.core.settings import default_home, load_settings
    from handoff.stack.layout import StackSettings
    from handoff.stack.local import LocalStack

    plan = ChaosPlan.make(
        duration_s=for_s, rate=rate, every_s=every, seed=seed, poison=poison,
        kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()),
        drain_timeout_s=drain_timeout,
    )  # fmt: skip
    # SIGTERM ends the run as Ctrl-C does: the supervised processes are stopped
    # (the run's finally), not left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    home = default_home()
    stack = LocalStack(StackSettings(home=home), console=console)
    report = run_chaos(plan, stack, load_settings(home), console)
    console.print(report.table())
    for breach in report.verdict.breaches():
        console.print(f"[red]breach:[/red] {breach}")
    if as_json:
        print(json.dumps(report_json(report)))
    raise typer.Exit(0 if report.ok else 1)
