"""``handoff consume MODULE:APP`` and ``handoff quarantine list|show|retry|discard``."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import Annotated, Any

import typer

from handoff.cli import bootstrap
from handoff.cli._common import (
    JsonOpt,
    YesOpt,
    _admin,
    _confirm,
    cell,
    console,
    print_json,
    print_rows,
)
from handoff.cli._process import (
    MetricsHostOpt,
    MetricsPortOpt,
    serve_metrics,
    setup_logging,
    stop_on_signals,
)
from handoff.telemetry import tracing

quarantine_app = typer.Typer(
    no_args_is_help=True, help="Events consumers could not process, and what to do with them."
)


def consume(
    target: Annotated[str, typer.Argument(help="The consumer app, as MODULE:APP.")],
    batch_size: Annotated[
        int | None,
        typer.Option(help="Events per transaction; 1 for non-idempotent effects. Default 100."),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="Units in flight at once, each on its own connection; one document's "
            "events stay in order. Default 1."
        ),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="Kafka consumer group (default handoff.<tenant>.<name>).")
    ] = None,
    topic: Annotated[
        list[str] | None, typer.Option(help="Topic to read (repeat for several).")
    ] = None,
    instance_id: Annotated[
        str | None,
        typer.Option(
            help="Static group membership: a stable id per process (e.g. review-1); a "
            "restart within the session timeout keeps its partitions without a rebalance."
        ),
    ] = None,
    reader_schema: Annotated[
        int | None, typer.Option(help="Read events as this schema version (default newest).")
    ] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
    idle_exit: Annotated[
        float | None, typer.Option(min=0.0, help="Exit after this many seconds without messages.")
    ] = None,
    executors: Annotated[
        int | None,
        typer.Option(
            help="Effect executors run in this process when the app declares effects "
            "(default HANDOFF_EFFECTS_EXECUTORS, 1); 0 leaves them to `handoff effects run`."
        ),
    ] = None,
) -> None:
    """Run a consumer: guarded handlers, ordered per document, failures to quarantine."""
    overrides: dict[str, Any] = {
        "batch_size": batch_size,
        "concurrency": concurrency,
        "group": group,
        "topics": topic or None,
        "instance_id": instance_id,
        "reader_schema_version": reader_schema,
    }
    setup_logging()
    process = bootstrap.consumer(target, overrides, executors)
    tracing.configure(process.runtime.app.name)
    stop_on_signals(process.stop)
    serve_metrics(metrics_port, metrics_host)
    count = process.run(idle_exit_s=idle_exit)
    console.print(f"consumer {process.runtime.app.name} processed {count} messages")


when = cell  # one formatter for times in tables (cli_common)


StatusOpt = Annotated[
    str,
    typer.Option(help="open, retry, resolved, discarded, or all."),
]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why; kept in the audit trail.")]
ByOpt = Annotated[str | None, typer.Option("--by", help="Who decides (default: your login name).")]
EntryArg = Annotated[int, typer.Argument(help="The quarantine entry's id (see list).")]


@quarantine_app.command("list")
def quarantine_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    consumer: Annotated[str | None, typer.Option(help="Only this consumer.")] = None,
    status: StatusOpt = "open",
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Quarantined events, newest first."""
    from handoff.core.quarantine import list_entries

    with _admin() as conn:
        rows = list_entries(
            conn,
            tenant=tenant,
            consumer=consumer,
            status=None if status == "all" else status,
            limit=limit,
        )
    if as_json:
        print_json(rows)
        return
    columns = ("id", "tenant", "consumer", "document", "v", "type", "category", "tries",
               "status", "last failure", "error")  # fmt: skip
    print_rows(
        f"quarantine ({status})",
        columns,
        [
            [str(r["id"]), r["tenant_id"], r["consumer"], r["document_id"] or "-",
             str(r["version"] or "-"), r["event_type"] or "-", r["category"],
             str(r["attempts"]), r["status"], when(r["last_failed_at"]), r["error"]]
            for r in rows
        ],
    )  # fmt: skip
    if not rows:
        console.print("nothing quarantined" + ("" if status == "all" else f" with status {status}"))


@quarantine_app.command("show")
def quarantine_show(entry: EntryArg, as_json: JsonOpt = False) -> None:
    """One entry: identity, position, failures, and its audit trail."""
    from handoff.core.quarantine import show_entry

    with _admin() as conn:
        found = show_entry(conn, entry)
    if as_json:
        print_json({**found.fields, "audit": found.audit})
        return
    for name, value in found.fields.items():
        shown = when(value) if name.endswith("_at") else value
        print(f"{name:>16}: {shown}")
    print("audit:")
    for step in found.audit:
        print(f"  {when(step['at'])}  {step['actor']}: {step['action']} - {step['detail'] or ''}")


@quarantine_app.command("retry")
def quarantine_retry(
    entry: EntryArg, reason: ReasonOpt, by: ByOpt = None, yes: YesOpt = False
) -> None:
    """Ask the consumer to take the event again (through its guard: applied at most once)."""
    from handoff.core.quarantine import request_retry

    _confirm(f"Retry quarantine entry {entry}?", yes)
    _decided(request_retry, entry, reason, by)
    console.print(f"entry {entry}: retry requested; the running consumer takes it within seconds")


@quarantine_app.command("discard")
def quarantine_discard(
    entry: EntryArg, reason: ReasonOpt, by: ByOpt = None, yes: YesOpt = False
) -> None:
    """Give the event up for good; its document's parked events go on."""
    from handoff.core.quarantine import discard

    _confirm(f"Discard quarantine entry {entry}? Its event will never be applied.", yes)
    _decided(discard, entry, reason, by)
    console.print(f"entry {entry}: discarded")


def _decided(decide: Callable[..., None], entry: int, reason: str, by: str | None) -> None:
    """A person's decision on an entry, recorded under their name (the login's by default)."""
    with _admin() as conn:
        decide(conn, entry, actor=by or getpass.getuser(), reason=reason)
