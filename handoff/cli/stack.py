"""``handoff stack up|down|status|env``: the local stack without Docker."""

from __future__ import annotations

import shlex
import time
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
        help="Parts to act on: postgres (postgres-2 and zookeeper of a PostgreSQL cluster, "
        "citus-worker-1... of a Citus cluster), "
        "kafka (kafka-2, kafka-3 of a cluster), registry, dynamodb "
        "(default: all but dynamodb; down: all that run)."
    ),
]


def local_stack(
    brokers: int | None = None, pg_nodes: int | None = None, citus: int | None = None
) -> LocalStack:
    from handoff.stack.layout import StackSettings
    from handoff.stack.local import LocalStack

    settings = StackSettings()
    if brokers is not None:
        settings.brokers = brokers
    if pg_nodes is not None:
        settings.pg_nodes = pg_nodes
    if citus is not None:
        settings.citus = citus
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
    pg_nodes: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=3,
            help="PostgreSQL nodes (2 for a Patroni cluster: a primary and a synchronous "
            "standby that takes over when it is lost). Chosen when a home first starts.",
        ),
    ] = None,
    citus: Annotated[
        int | None,
        typer.Option(
            min=2,
            max=8,
            help="Citus workers: PostgreSQL is a Citus coordinator and this many workers, "
            "tables distributed by tenant. Needs Citus installed or HANDOFF_STACK_CITUS_SOURCE "
            "(a source release, built once). Chosen when a home first starts; later, more "
            "adds workers (then: handoff db rebalance), fewer drains and removes the last.",
        ),
    ] = None,
) -> None:
    """Start the stack (idempotent): reuse running parts, start the rest, wait until healthy."""
    from handoff.stack.local import OPTIONAL_PARTS

    unknown = set(with_ or []) - set(OPTIONAL_PARTS)
    if unknown:
        raise typer.BadParameter(f"{', '.join(sorted(unknown))}: the optional parts are "
                                 f"{', '.join(OPTIONAL_PARTS)}", param_hint="--with")  # fmt: skip
    stack = local_stack(brokers, pg_nodes, citus)
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


def _move_primary(how: str, to: str | None) -> None:
    from handoff.core.errors import StackError

    stack = local_stack()
    if stack.cluster is None:
        raise StackError(
            f"this stack runs one PostgreSQL server; a {how} needs a cluster: "
            "handoff stack up --pg-nodes 2 in a new home"
        )
    began = time.monotonic()
    before = stack.cluster.leader()
    after = stack.cluster.move_primary(how, to)
    console.print(f"{how}: {before} → {after}; waiting until it takes writes…")
    stack.cluster.wait_writable(stack.postgres.superuser_url(), 90)
    console.print(f"primary is {after}, writable {time.monotonic() - began:.1f} s after the {how}")
    console.print(status_table(stack.status()))


ToOption = Annotated[
    str | None,
    typer.Option("--to", help="The standby to promote (postgres-2, ...); default: Patroni picks."),
]


@stack_app.command("switchover")
def stack_switchover(to: ToOption = None) -> None:
    """Move the primary to a standby, planned: the old primary follows as a standby."""
    _move_primary("switchover", to)


@stack_app.command("failover")
def stack_failover(to: ToOption = None) -> None:
    """Promote a standby now, as Patroni does when the primary is lost."""
    _move_primary("failover", to)
