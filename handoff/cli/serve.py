"""``handoff serve``: the HTTP API and the tracker's web UI."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from handoff.cli import bootstrap
from handoff.cli._common import console


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    pool_size: Annotated[int, typer.Option(min=1, max=1000, help="Database connections.")] = 16,
) -> None:
    """Serve the HTTP API (emits, queries, metrics) and the tracker's web UI at /."""
    from handoff.cli._process import setup_logging
    from handoff.tracker import serving

    setup_logging(logging.WARNING, service="handoff-api")
    app, tracker = bootstrap.tracker(pool_size=pool_size)
    console.print(
        f"Handoff tracker on http://{host}:{port}  (web UI: /, API docs: /docs); "
        "sign in with any service credential of the tenant to look at"
    )
    serving.serve(app, host, port, tracker)
