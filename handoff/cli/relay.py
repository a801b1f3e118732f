"""``handoff relay``: the outbox to Kafka."""

from __future__ import annotations

from typing import Annotated

import typer

from handoff.cli import bootstrap
from handoff.cli._common import console
from handoff.cli._process import (
    MetricsHostOpt,
    MetricsPortOpt,
    serve_metrics,
    setup_logging,
    stop_on_signals,
)


def relay(
    once: Annotated[bool, typer.Option("--once", help="Drain what is pending, then exit.")] = False,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
) -> None:
    """Publish committed outbox rows to Kafka (run several for availability)."""
    setup_logging(service="handoff-relay")
    worker = bootstrap.relay()
    stop_on_signals(worker.stop)
    serve_metrics(metrics_port, metrics_host)
    count = worker.run(once=once)
    console.print(f"relay published {count} events")
