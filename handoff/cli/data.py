"""``handoff retention`` and ``handoff projection``: how long data is kept, and
rebuilding a read model from Kafka."""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Any

import typer

from handoff.cli._common import YesOpt, _admin, _confirm, cell, console, print_rows

retention_app = typer.Typer(
    no_args_is_help=True,
    help="How long receipts, guards, published outbox rows, rejections and closed "
    "quarantine entries are kept, with the replay window they must cover.",
)

Window = Annotated[str | None, typer.Option(help="A duration: 12h, 30d, 2w, 1d12h.")]


def _print_retention(found: Any, title: str) -> None:
    from handoff.operate.retention import COVERING, say

    rows = [["replay_window", say(found.replay_window), "how far back a replay may reach"]]
    for name, window in found.windows().items():
        if name != "replay_window":
            note = "≥ replay window: " + COVERING[name] if name in COVERING else ""
            rows.append([name, say(window), note])
    print_rows(title, ("kept", "for", "why at least that long"), rows)
    console.print(f"last changed {cell(found.updated_at)} by {found.updated_by}", highlight=False)


@retention_app.command("show")
def retention_show() -> None:
    """The windows in force."""
    from handoff.operate.retention import current

    with _admin() as conn:
        _print_retention(current(conn), "retention")


@retention_app.command("set")
def retention_set(
    replay_window: Window = None,
    receipts: Window = None,
    guards: Window = None,
    outbox: Window = None,
    rejections: Window = None,
    quarantine: Window = None,
    by: Annotated[str | None, typer.Option(help="Who changes it (default: login)")] = None,
) -> None:
    """Change some windows; one shorter than the replay window is refused, with why."""
    import getpass

    from handoff.operate.retention import configure, parse_duration

    given = {"replay_window": replay_window, "receipts": receipts, "guards": guards,
             "outbox": outbox, "rejections": rejections, "quarantine": quarantine}  # fmt: skip
    changes = {name: parse_duration(text) for name, text in given.items() if text is not None}
    if not changes:
        raise typer.BadParameter("name at least one window, e.g. --guards 30d")
    with _admin() as conn:
        found = configure(conn, by=by or getpass.getuser(), **changes)
    _print_retention(found, "retention (changed)")


@retention_app.command("run")
def retention_run(
    only: Annotated[
        str | None,
        typer.Option(
            help="Only these (comma-separated): receipts, guards, outbox, rejections, quarantine."
        ),
    ] = None,
    every: Annotated[
        float | None,
        typer.Option(min=1.0, help="Purge again every this many seconds (Ctrl-C stops)."),
    ] = None,
    batch: Annotated[int, typer.Option(min=100, max=100_000, help="Rows per delete.")] = 10_000,
) -> None:
    """Delete what is older than its window, in batches, with progress."""
    from handoff.operate.retention import PURGES, purge

    families = [f.strip() for f in only.split(",")] if only else None
    unknown = set(families or []) - set(PURGES)
    if unknown:
        raise typer.BadParameter(f"{', '.join(sorted(unknown))}: not one of {', '.join(PURGES)}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while True:
        with _admin() as conn:
            done = purge(
                conn, only=families, limit=batch, stopping=stop.is_set,
                progress=lambda family, n: console.print(f"  {family}: {n:,} deleted so far")
                if n and n % (batch * 10) == 0 else None,
            )  # fmt: skip
        print_rows("purged", ("family", "rows deleted"),
                   [[family, f"{n:,}"] for family, n in done.items()])  # fmt: skip
        if every is None or stop.wait(every):
            return


projection_app = typer.Typer(
    no_args_is_help=True,
    help="Rebuild a latest-state projection of documents from Kafka into its own schema, "
    "compare it with the authoritative tables, and switch readers to it on request.",
)
ProjectionArg = Annotated[str, typer.Argument(help="The projection's name (a-z, 0-9, _).")]


@projection_app.command("rebuild")
def projection_rebuild(
    name: ProjectionArg,
    topic: Annotated[str | None, typer.Option(help="Default: the consumers' topic.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's documents.")] = None,
) -> None:
    """Read the topic up to its end now into schema handoff_projection_NAME (progress shown)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from handoff.consumers.settings import ConsumerSettings
    from handoff.core.settings import load_settings
    from handoff.operate.projection import rebuild

    chosen = topic or ConsumerSettings().topics[0]
    with Progress("rebuilding", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:  # fmt: skip
        task = bar.add_task("events", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        built = rebuild(load_settings(), name, topic=chosen, tenant=tenant, progress=progress)
    console.print(
        f"projection {name}: {built.events:,} event(s) of {chosen} in {built.seconds:.1f} s"
        + (f"; {built.undecodable} undecodable, skipped" if built.undecodable else "")
        + f". Next: handoff projection compare {name}",
        highlight=False,
    )


@projection_app.command("compare")
def projection_compare(
    name: ProjectionArg,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
) -> None:
    """Entity counts per owner and the documents that differ (exit 1 when any does)."""
    from handoff.operate.projection import compare

    with _admin() as conn:
        found = compare(conn, name, tenant=tenant)
    print_rows(f"projection {name} against handoff.document_state",
               ("tenant", "owner ('' finished)", "projected", "authoritative"),
               [[c["tenant_id"], c["owner"], str(c["projected"]), str(c["authoritative"])]
                for c in found.count_mismatches] or [["-", "-", "counts agree", "-"]])  # fmt: skip
    if found.sample:
        columns = tuple(found.sample[0])
        print_rows(f"{found.differences} document(s) differ, the first {len(found.sample)}",
                   columns, [[cell(r[c]) for c in columns] for r in found.sample])  # fmt: skip
    console.print("no differences" if not found.differences
                  else f"[red]{found.differences} difference(s)[/red]")  # fmt: skip
    raise typer.Exit(0 if not found.differences else 1)


@projection_app.command("switch")
def projection_switch(
    name: ProjectionArg,
    force: Annotated[
        bool, typer.Option("--force", help="Switch although the last comparison differed.")
    ] = False,
) -> None:
    """Point the readers' view handoff_read.documents at this projection."""
    from handoff.operate.projection import switch

    with _admin() as conn:
        switch(conn, name, force=force)
    console.print(f"readers of handoff_read.documents now read projection {name}")


@projection_app.command("list")
def projection_list() -> None:
    """Projections, what they hold, and which one readers use."""
    from handoff.operate.projection import current, listing

    with _admin() as conn:
        found, used = listing(conn), current(conn)
    print_rows("projections", ("name", "topic", "tenant", "events", "finished", "differences",
                               "readers"),
               [[p["name"], cell(p.get("topic")), cell(p.get("tenant_id")),
                 cell(p.get("events")), cell(p.get("finished_at")), cell(p.get("differences")),
                 "yes" if p["name"] == used else ""] for p in found])  # fmt: skip


@projection_app.command("drop")
def projection_drop(name: ProjectionArg, yes: YesOpt = False) -> None:
    """Drop a projection's schema (not the one readers use)."""
    from handoff.operate.projection import drop

    _confirm(f"Drop projection {name} and its schema?", yes)
    with _admin() as conn:
        drop(conn, name)
    console.print(f"projection {name} dropped")
