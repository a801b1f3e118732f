"""The AWS twin's commands: ``handoff dynamodb-relay``, ``handoff import dynamodb`` and
``handoff export dynamodb``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from handoff.cli._common import console
from handoff.cli._process import long_running
from handoff.core.errors import OutcomeUnknown, Unavailable

if TYPE_CHECKING:
    from handoff.core.settings import HandoffSettings

T = TypeVar("T")


def _ported(what: str, first: str, run: Callable[[Callable[[str], None]], T]) -> T:
    """Run a port under a spinner whose line ``run`` updates; a lost database says how
    to go on (positions are saved, so the same command resumes)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console) as bar:  # fmt: skip
        task = bar.add_task(first, total=None)
        try:
            return run(lambda line: bar.update(task, description=line))
        except (OutcomeUnknown, Unavailable) as exc:
            raise _resumable(what, exc) from exc


def _resumable(what: str, exc: Exception) -> typer.Exit:
    """A lost database: what was written stays, the positions too; say how to go on."""
    reason = str(exc).split(";")[0]
    console.print(f"[red]error[/red]: {reason}. Run the same {what} again: it resumes "
                  "after the last page it saved.", highlight=False)  # fmt: skip
    return typer.Exit(1)


def _twin() -> tuple[HandoffSettings, str]:
    """The settings and the DynamoDB endpoint, or a message saying how to get one."""
    from handoff.core.settings import load_settings

    settings = load_settings()
    if not settings.dynamodb_url:
        raise typer.BadParameter("set HANDOFF_DYNAMODB_URL (handoff stack up --with dynamodb)")
    return settings, settings.dynamodb_url


def dynamodb_relay(
    table: Annotated[str, typer.Option(help="The AWS design's table.")] = "handoff",
    topic: Annotated[str, typer.Option(help="Kafka topic, as the relay's.")] = "handoff.events",
    once: Annotated[bool, typer.Option("--once", help="Publish what is there, then stop.")] = False,
    every: Annotated[float, typer.Option(min=0.05, help="Seconds between reads.")] = 0.5,
) -> None:
    """Publish the DynamoDB table's stream to Kafka as the relay publishes the outbox
    (HANDOFF_DYNAMODB_URL names the endpoint; handoff stack up --with dynamodb sets it)."""

    from handoff.dynamo.streams import StreamReader
    from handoff.stack.dynamodb import client

    settings, url = _twin()
    reader = StreamReader(settings, client(url), client(url, "dynamodbstreams"),
                          table=table, topic=topic)  # fmt: skip
    stop = threading.Event()
    long_running(stop.set)
    total = 0
    while True:
        total += reader.run_once()
        if once or stop.wait(every):
            console.print(f"published {total} event(s) to {topic}", highlight=False)
            return


import_app = typer.Typer(no_args_is_help=True, help="Port documents from another store.")


@import_app.command("dynamodb")
def import_dynamodb(
    table: Annotated[str, typer.Option(help="The AWS design's table.")] = "handoff",
    segments: Annotated[
        int, typer.Option(min=1, max=64, help="Parallel scan segments (threads).")
    ] = 4,
) -> None:
    """Copy a table of the AWS design into PostgreSQL (resumable), then verify it:
    counts equal states, versions gapless, receipts intact (exit 1 otherwise)."""

    from handoff.dynamo.porting import import_table
    from handoff.stack.dynamodb import client

    settings, url = _twin()
    found = _ported("import", "scanning", lambda say: import_table(
        client(url), settings.database_url, table, segments=segments,
        progress=lambda n: say(f"{n:,} item(s) scanned")))  # fmt: skip
    console.print(
        f"imported {found.states:,} state(s), {found.events:,} version(s), "
        f"{found.receipts:,} receipt(s) of {len(found.tenants)} tenant(s) from {table}",
        highlight=False,
    )
    if found.unregistered:
        owners = ", ".join(f"{o} ({t})" for t, o in found.unregistered[:10])
        console.print(f"register these owners before handing work on (handoff service add): "
                      f"{owners}", highlight=False)  # fmt: skip
    for problem in found.problems:
        console.print(f"[red]{problem}[/red]", highlight=False)
    raise typer.Exit(1 if found.problems else 0)


export_app = typer.Typer(no_args_is_help=True, help="Port documents to another store.")


@export_app.command("dynamodb")
def export_dynamodb(
    table: Annotated[str, typer.Option(help="The AWS design's table (created if absent).")
                     ] = "handoff",
    tenant: Annotated[list[str] | None, typer.Option(
        help="Export this tenant (repeatable); every tenant if not given.")] = None,
    writers: Annotated[int, typer.Option(min=1, max=32, help="Writer threads.")] = 4,
) -> None:  # fmt: skip
    """Copy PostgreSQL's services, documents, history, receipts, counts and rejections
    into a table of the AWS design (resumable), then verify counts and a sample of
    documents read back through the DynamoDB store (exit 1 otherwise). Stop writers first."""

    from handoff.dynamo.exporting import Exported, export_table
    from handoff.stack.dynamodb import client

    settings, url = _twin()

    def progress(say: Callable[[str], None]) -> Callable[[Exported], None]:
        return lambda found: say(f"{found.items:,} item(s) written ({found.states:,} state(s), "
                                 f"{found.events:,} version(s))")  # fmt: skip

    found = _ported("export", "exporting", lambda say: export_table(
        client(url), settings.database_url, table, tenants=tenant, writers=writers,
        progress=progress(say)))  # fmt: skip
    if found.resumed:
        console.print("resumed a stopped export: the figures below are this run's")
    console.print(
        f"exported {found.services:,} service(s), {found.states:,} state(s), "
        f"{found.events:,} version(s), {found.receipts:,} receipt(s), "
        f"{found.rejections:,} rejection(s) of {len(found.tenants)} tenant(s) to {table}; "
        f"checked counts and {len(found.sample)} sampled document(s)",
        highlight=False,
    )
    for problem in found.problems:
        console.print(f"[red]{problem}[/red]", highlight=False)
    raise typer.Exit(1 if found.problems else 0)
