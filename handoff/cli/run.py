"""``handoff run DEPLOYMENT.toml``: start a deployment's processes and watch them."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from handoff.core.settings import default_home


def run(
    deployment: Annotated[
        Path, typer.Argument(help="The deployment file (TOML): which processes, how many.")
    ],
    for_s: Annotated[
        float | None,
        typer.Option(
            "--for", min=1.0, help="Stop everything after this many seconds (default: Ctrl-C)."
        ),
    ] = None,
    logs: Annotated[
        Path | None,
        typer.Option(help="Folder for each process's log (default <HANDOFF_HOME>/logs)."),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="Run only these processes (comma-separated names), e.g. one per container."
        ),
    ] = None,
    env_file: Annotated[
        Path | None,
        typer.Option(
            help="KEY=VALUE lines added to the environment before ${VARIABLE}s in the file "
            "are filled in (e.g. credentials written by handoff demo --setup-only)."
        ),
    ] = None,
) -> None:
    """Run the processes of a deployment: restarted when they crash, one log view,
    Ctrl-C stops them all in the reverse of their start order."""
    from handoff.deploy.deployment import load, load_env_file, only_processes
    from handoff.deploy.supervisor import Supervisor

    if env_file is not None:
        load_env_file(env_file)
    spec = load(deployment)
    if only is not None:
        spec = only_processes(spec, [n.strip() for n in only.split(",") if n.strip()])
    out = Console(highlight=False, soft_wrap=True)
    lock = threading.Lock()
    width = max(len(p.label(n)) for p in spec.process for n in range(p.count))

    def say(label: str, colour: str, line: str) -> None:
        with lock:
            out.print(f"[{colour}]{label:>{max(width, 3)}} |[/{colour}] {escape(line)}")

    supervisor = Supervisor(spec, logs or default_home() / "logs", say)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: supervisor.stop())
    counts = ", ".join(f"{p.name} x{p.count}" for p in spec.process)
    say("run", "bold", f"{deployment}: {counts}; Ctrl-C stops them all")
    raise typer.Exit(supervisor.run(for_s=for_s))
