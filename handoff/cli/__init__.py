"""The ``handoff`` command: one typer app, one module per command group.

The composition layer of the package (DESIGN.md "The shape"): it may import
every other package, and none imports it. Long-running commands set their
process up through ``_process`` (logging, signals, metrics) and build what
they run through ``bootstrap``.
"""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from handoff.cli._common import console
from handoff.cli.audit import audit, backlog
from handoff.cli.bench import bench
from handoff.cli.chaos import chaos
from handoff.cli.consume import consume, quarantine_app
from handoff.cli.data import projection_app, retention_app
from handoff.cli.db import db_app
from handoff.cli.demo import demo
from handoff.cli.dynamodb import dynamodb_relay, export_app, import_app
from handoff.cli.effects import effects_app, rehearse, sandbox_provider
from handoff.cli.outbox import outbox_app
from handoff.cli.relay import relay
from handoff.cli.replay import replay_app
from handoff.cli.run import run
from handoff.cli.schemas import schemas_app
from handoff.cli.serve import serve
from handoff.cli.service import service_app
from handoff.cli.stack import stack_app
from handoff.core.errors import HandoffError

app = typer.Typer(no_args_is_help=True, help="Handoff: explicit service ownership of work.")
for name, group in (
    ("stack", stack_app), ("db", db_app), ("service", service_app), ("schemas", schemas_app),
    ("quarantine", quarantine_app), ("effects", effects_app), ("retention", retention_app),
    ("replay", replay_app), ("projection", projection_app), ("import", import_app),
    ("export", export_app), ("outbox", outbox_app),
):  # fmt: skip
    app.add_typer(group, name=name)
for name, command in (
    ("serve", serve), ("relay", relay), ("consume", consume), ("audit", audit),
    ("backlog", backlog), ("dynamodb-relay", dynamodb_relay),
    ("sandbox-provider", sandbox_provider), ("rehearse", rehearse), ("run", run),
    ("demo", demo), ("chaos", chaos),
):  # fmt: skip
    app.command(name)(command)
app.command(
    "bench",
    # --help goes through too: the options are the benchmarks' own (python -m benchmarks).
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "help_option_names": [],
    },
)(bench)


def main() -> None:
    from handoff.core.db import login_problem

    try:
        app()
    except HandoffError as exc:
        console.print(f"[red]error[/red] ({exc.code}): {exc}", highlight=False)
        sys.exit(1)
    except ValidationError as exc:
        console.print(f"[red]invalid setting[/red]: {exc}", highlight=False)
        sys.exit(2)
    except Exception as exc:
        problem = login_problem(exc)  # a failed connection is a setting to fix
        if problem is None:
            raise
        console.print(f"[red]error[/red] ({problem.code}): {problem}", highlight=False)
        sys.exit(1)


__all__ = ["app", "main"]
