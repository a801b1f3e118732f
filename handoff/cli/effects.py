"""``handoff effects list|show|resolve|run`` and ``handoff sandbox-provider``."""

from __future__ import annotations

import getpass
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from handoff.cli import bootstrap
from handoff.cli._common import (
    JsonOpt,
    YesOpt,
    _admin,
    _confirm,
    console,
    print_json,
    print_rows,
)
from handoff.cli._common import cell as when
from handoff.cli._process import (
    MetricsHostOpt,
    MetricsPortOpt,
    long_running,
    setup_logging,
    stop_on_signals,
)
from handoff.cli.bootstrap import load_app
from handoff.core.settings import default_home, load_settings

effects_app = typer.Typer(
    no_args_is_help=True,
    help="The effect ledger: intents of external effects, their executors and reconciliation.",
)

IntentArg = Annotated[int, typer.Argument(help="The intent's id (see list).")]


@effects_app.command("list")
def effects_list(
    unresolved: Annotated[
        bool, typer.Option("--unresolved", help="Only intents waiting for a person.")
    ] = False,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    consumer: Annotated[str | None, typer.Option(help="Only this consumer.")] = None,
    document: Annotated[str | None, typer.Option(help="Only this document.")] = None,
    state: Annotated[
        str | None,
        typer.Option(help="intended, claimed, submitted, succeeded, failed or unknown."),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Effect intents, newest first."""
    from handoff.core.effects import list_intents

    with _admin() as conn:
        rows = list_intents(
            conn,
            tenant=tenant,
            consumer=consumer,
            document=document,
            state=state,
            unresolved=unresolved,
            limit=limit,
        )
    if as_json:
        print_json(rows)
        return
    columns = ("id", "tenant", "consumer", "effect", "document", "state", "reconciliation",
               "tries", "owner", "provider ref", "updated", "error")  # fmt: skip
    print_rows(
        "effect intents" + (" (unresolved)" if unresolved else ""),
        columns,
        [
            [str(r["id"]), r["tenant_id"], r["consumer"], r["effect"],
             f"{r['document_id']} run {r['run_id']}", r["state"], r["reconciliation"],
             str(r["attempts"]), r["owner"], r["provider_ref"] or "-", when(r["updated_at"]),
             r["error"] or ""]
            for r in rows
        ],
    )  # fmt: skip
    if not rows:
        console.print("no unresolved intents" if unresolved else "no intents")


@effects_app.command("show")
def effects_show(intent: IntentArg, as_json: JsonOpt = False) -> None:
    """One intent: identity, request, attempts, provider reference, and its history."""
    from handoff.core.effects import show_intent

    with _admin() as conn:
        found = show_intent(conn, intent)
    if as_json:
        print_json({**found.fields, "history": found.history})
        return
    for name, value in found.fields.items():
        shown = when(value) if name.endswith("_at") or name.endswith("_until") else value
        print(f"{name:>16}: {shown}")
    print("history:")
    for step in found.history:
        print(
            f"  {when(step['at'])}  {step['actor']}: {step['from_state'] or '-'} -> "
            f"{step['to_state']}  {step['detail'] or ''}"
        )


@effects_app.command("resolve")
def effects_resolve(
    intent: IntentArg,
    outcome: Annotated[
        str,
        typer.Option(
            help="succeeded or failed (what you found at the provider), or retry "
            "(the executors look it up again before any resubmission)."
        ),
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the history.")],
    by: Annotated[str | None, typer.Option("--by", help="Who decides (default: you).")] = None,
    provider_ref: Annotated[
        str | None, typer.Option(help="The provider's id of the operation, if you found it.")
    ] = None,
    yes: YesOpt = False,
) -> None:
    """Settle an unresolved intent (its owner's decision, audited)."""
    from handoff.core.effects import resolve

    _confirm(f"Resolve intent {intent} as {outcome}?", yes)
    with _admin() as conn:
        resolve(
            conn,
            intent,
            outcome=outcome,
            actor=by or getpass.getuser(),
            reason=reason,
            provider_ref=provider_ref,
        )
    console.print(f"intent {intent}: resolved ({outcome})")


@effects_app.command("run")
def effects_run(
    target: Annotated[str, typer.Argument(help="The consumer app, as MODULE:APP.")],
    executors: Annotated[
        int | None, typer.Option(help="Executor workers (default HANDOFF_EFFECTS_EXECUTORS, 1).")
    ] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
) -> None:
    """Run executors only: perform the app's committed intents until stopped."""
    app = load_app(target)
    workers = bootstrap.effect_executors(app, executors)
    if workers.config.executors < 1:
        console.print("[red]--executors must be at least 1 here[/red]")
        raise typer.Exit(2)
    stop = threading.Event()
    long_running(stop.set, metrics_port, metrics_host, service=f"{app.name}-executor")
    workers.start()
    console.print(f"{app.name}: {workers.config.executors} executor(s) running; Ctrl-C stops them")
    stop.wait()
    workers.stop()


def sandbox_provider(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port (0: any free one, printed).")
    ] = 8900,
    data: Annotated[
        Path | None,
        typer.Option(help="Folder of its records (default <HANDOFF_HOME>/sandbox-provider)."),
    ] = None,
    latency_ms: Annotated[
        int, typer.Option(help="Added to every payment request, as a real provider's latency.")
    ] = 0,
) -> None:
    """Run the sandbox payments provider (idempotency keys, status lookup, faults)."""
    from handoff.sandbox.server import Sandbox

    setup_logging()
    if not 0 <= latency_ms <= 60_000:
        console.print("[red]--latency-ms must be from 0 to 60000[/red]")
        raise typer.Exit(2)
    folder = data or default_home() / "sandbox-provider"
    try:
        sandbox = Sandbox(host, port, folder, latency_ms=latency_ms)
    except OSError as exc:  # its folder, or the port taken or a host not of this machine
        where = exc.filename or f"{host}:{port} (give another --port or --host)"
        console.print(f"[red]cannot start the sandbox provider: {where}: "
                      f"{exc.strerror or exc}[/red]")  # fmt: skip
        raise typer.Exit(2) from exc
    # Its stop waits for the server's loop: from a thread, not the signal handler.
    stop_on_signals(lambda: threading.Thread(target=sandbox.stop, daemon=True).start())
    # The address on stdout, alone: scripts read it (port 0 picks one).
    print(sandbox.url, flush=True)
    console.print(f"sandbox provider on {sandbox.url}, records in {folder}")
    sandbox.serve()


def rehearse(
    provider_url: Annotated[
        str,
        typer.Option(
            envvar="HANDOFF_SANDBOX_URL",
            help="The sandbox provider (handoff sandbox-provider) to pay against.",
        ),
    ] = "http://127.0.0.1:8900",
    tenant: Annotated[
        str | None, typer.Option(help="Scratch tenant to create (default rehearsal-<random>).")
    ] = None,
    evidence: Annotated[
        Path | None, typer.Option(help="Write every row's evidence to this JSON file.")
    ] = None,
) -> None:
    """Run the concurrent-delivery rehearsal: five injected failures, with evidence.

    Run it after every change of concurrency or configuration. It creates a
    scratch tenant (services shop, payments, shipping) and pays against the
    sandbox provider only; exit status 1 when a row does not hold.
    """
    import httpx
    import orjson

    from handoff.rehearsal.rows import Rehearsal, Row

    try:
        httpx.get(f"{provider_url.rstrip('/')}/healthz", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        console.print(
            f"[red]no sandbox provider at {provider_url}[/red] ({exc}); start one with "
            "`handoff sandbox-provider` or pass --provider-url"
        )
        raise typer.Exit(2) from exc
    rehearsal = Rehearsal(load_settings(), provider_url, tenant=tenant)
    console.print(f"rehearsing in scratch tenant {rehearsal.tenant} against {provider_url}")

    def progress(row: Row) -> None:
        mark = "[green]holds[/green]" if row.passed else "[red]BREACH[/red]"
        console.print(f"  row {row.number}: {row.injected}: {mark}")

    try:
        rows = rehearsal.run(progress)
    finally:
        rehearsal.close()
    table = Table(title=f"concurrent-delivery rehearsal ({rehearsal.tenant})", show_lines=True)
    for column in (
        "#",
        "failure injected",
        "local assertion",
        "found",
        "external assertion",
        "found",
    ):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.number,
            row.injected,
            row.local,
            ("ok: " if row.local_ok else "FAILED: ") + row.found_local,
            row.external,
            ("ok: " if row.external_ok else "FAILED: ") + row.found_external,
        )
    Console(width=None if sys.stdout.isatty() else 240).print(table)
    if evidence is not None:
        evidence.write_bytes(
            orjson.dumps(
                {"tenant": rehearsal.tenant, "rows": [vars(row) for row in rows]},
                option=orjson.OPT_INDENT_2,
                default=str,
            )
        )
        console.print(f"evidence written to {evidence}")
    failed = [row.number for row in rows if not row.passed]
    if failed:
        console.print(f"[red]rows that do not hold: {', '.join(failed)}[/red]")
        raise typer.Exit(1)
    console.print(
        f"all {len(rows)} rows hold; the scratch tenant {rehearsal.tenant} keeps the evidence"
    )
