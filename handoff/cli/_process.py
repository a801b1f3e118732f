"""What every long-running ``handoff`` process sets up, once and the same way.

Logging (one format, the HTTP clients' per-request lines quieted), the stop
signals (SIGTERM and SIGINT call the process's own stop, so it finishes
what it holds instead of dying mid-unit), and the Prometheus endpoint.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Annotated

import typer

from handoff.core.errors import ConfigurationError
from handoff.telemetry import logs, tracing

# One line per registry or provider request otherwise.
QUIET = ("httpx", "httpx2")

MetricsPortOpt = Annotated[
    int | None,
    typer.Option("--metrics-port", min=1, max=65535, help="Serve Prometheus metrics on this port."),
]
MetricsHostOpt = Annotated[
    str,
    typer.Option("--metrics-host", help="Interface for the metrics (0.0.0.0 in a container)."),
]


def setup_logging(level: int = logging.INFO, service: str | None = None) -> None:
    """Text lines, or JSON lines with HANDOFF_LOG_FORMAT=json (telemetry/logs.py); and
    tracing as ``service`` when HANDOFF_OTEL_EXPORTER names an exporter
    (telemetry/tracing.py)."""
    logs.configure(level)
    for noisy in QUIET:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if service is not None:
        tracing.configure(service)


def stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call ``stop`` (which must return at once: it runs in the
    handler)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop())


def serve_metrics(port: int | None, host: str = "127.0.0.1") -> None:
    """The process's /metrics on ``port`` (none when it is None); a port it cannot
    listen on (taken, or a host not of this machine) is a ConfigurationError saying so."""
    if port is None:
        return
    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; give another "
            "--metrics-port (or --metrics-host)"
        ) from exc


def long_running(
    stop: Callable[[], None],
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    service: str | None = None,
) -> None:
    """All three, for a process that runs until stopped (traced as ``service``)."""
    setup_logging(service=service)
    stop_on_signals(stop)
    serve_metrics(metrics_port, metrics_host)
