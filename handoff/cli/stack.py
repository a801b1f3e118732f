"""``handoff stack up|down|status|env``: the local stack without Docker."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from handoff.cli._common import console

if TYPE_CHECKING:
    from handoff.stack.local import LocalStack
    from handoff.stack.part import PartStatus

stack_app = typer.Typer(no_args_is_help=True, help="The local stack: PostgreSQL, Kafka, registry.")

PartsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Parts to act on: postgres, kafka (kafka-2, kafka-3 of a cluster), registry, "
        "dynamodb (default: all but dynamodb; down: all that run)."
    ),
]


def local_stack(brokers: int | None = None) -> LocalStack:
    from handoff.stack.layout import StackSettings
    from handoff.stack.local import LocalStack

    settings = StackSettings() if brokers is None else StackSettings(brokers=brokers)
    return LocalStack(settings, console=console)


def status_table(statuses: list[PartStatus]) -> Table:
    table = Table(title="Handoff local stack")
    for column in ("part", "address", "pid", "health", "role"):
        table.add_column(column)
    for s in statuses:
        health = "[green]healthy[/green]" if s.healthy else f"[red]{s.problem}[/red]"
        table.add_row(s.name, s.address, str(s.pid or "-"), health, s.role or "")
    return table


@stack_app.command("up")
def stack_up(
    parts: PartsArg = None,
    with_: Annotated[
        list[str] | None,
        typer.Option("--with", help="Also start an optional part: dynamodb (the AWS twin)."),
    ] = None,
    brokers: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=5,
            help="Kafka brokers (3 for a replicated cluster: factor 3, min.insync.replicas 2). "
            "Chosen when a home first starts; default 1, or what the home already runs.",
        ),
    ] = None,
) -> None:
    """Start the stack (idempotent): reuse running parts, start the rest, wait until healthy."""
    from handoff.stack.local import OPTIONAL_PARTS

    unknown = set(with_ or []) - set(OPTIONAL_PARTS)
    if unknown:
        raise typer.BadParameter(f"{', '.join(sorted(unknown))}: the optional parts are "
                                 f"{', '.join(OPTIONAL_PARTS)}", param_hint="--with")  # fmt: skip
    stack = local_stack(brokers)
    statuses = stack.up([*(parts or stack.standing), *(with_ or [])])
    console.print(status_table(statuses))
    console.print('Point tools at it with: eval "$(handoff stack env)"')


@stack_app.command("down")
def stack_down(parts: PartsArg = None) -> None:
    """Stop the parts this project's stack started (nothing else)."""
    stopped = local_stack().down(parts or None)
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@stack_app.command("status")
def stack_status() -> None:
    """Each part, its address and health. Exits 1 unless all are healthy."""
    statuses = local_stack().status()
    console.print(status_table(statuses))
    if not all(s.healthy for s in statuses):
        raise typer.Exit(1)


@stack_app.command("env")
def stack_env() -> None:
    """Shell-ready settings of the stack: eval "$(handoff stack env)"."""
    for key, value in local_stack().env().items():
        print(f"export {key}={shlex.quote(value)}")
