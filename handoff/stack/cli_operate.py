"""``handoff audit``: the invariants, checked once or periodically with metrics."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from datetime import datetime
from typing import Annotated, Any

import typer

from handoff.stack.cli_common import _admin, console, print_rows

log = logging.getLogger("handoff.audit")


def _providers(given: list[str]) -> dict[str, str]:
    found = {}
    for item in given:
        effect, sep, url = item.partition("=")
        if not sep or not effect or not url.startswith(("http://", "https://")):
            raise typer.BadParameter(
                f"{item!r}: expected EFFECT=URL, e.g. pay=http://127.0.0.1:8900",
                param_hint="--provider",
            )
        found[effect] = url
    return found


def _cell(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return "-" if value is None else str(value)


def audit(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (default: all).")] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option(
            help="EFFECT=URL: also check that every succeeded EFFECT appears exactly once at "
            "this payments API (the sandbox provider's). Repeat for several effects."
        ),
    ] = None,
    outbox_window_hours: Annotated[
        float | None,
        typer.Option(
            help="Check versions accepted this recently against the outbox "
            "(default: the relay's retention, HANDOFF_RELAY_RETENTION_HOURS)."
        ),
    ] = None,
    every: Annotated[
        float | None,
        typer.Option(help="Audit again every this many seconds, exporting metrics (Ctrl-C stops)."),
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(help="With --every: serve Prometheus metrics on this port.")
    ] = 9410,
    metrics_host: Annotated[str, typer.Option(help="With --every: metrics interface.")] = (
        "127.0.0.1"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
) -> None:
    """Check the invariants; exit 1 with the offending rows when one is broken."""
    from handoff.operate.audit import Report
    from handoff.operate.audit import audit as run_audit
    from handoff.relay.settings import RelaySettings

    providers = _providers(provider or [])
    window_h = outbox_window_hours or RelaySettings().retention_hours
    # A minute's margin: the relay may be purging the rows at the window's edge.
    window_s = max(window_h * 3600 - 60, 0)

    def once() -> Report:
        say = (lambda _: None) if as_json else (lambda line: console.print(f"  {line}"))
        with _admin() as conn:
            return run_audit(
                conn, tenant=tenant, outbox_window_s=window_s, providers=providers, progress=say
            )

    if every is None:
        report = once()
        _show(report, as_json)
        raise typer.Exit(0 if report.ok else 1)
    _periodically(once, every, metrics_host, metrics_port)


def _show(report: Any, as_json: bool) -> None:
    if as_json:
        out = {
            "ok": report.ok,
            "tenant": report.tenant,
            "startedAt": report.started_at.isoformat(),
            "outbox": {"pending": report.pending, "parked": report.parked,
                       "oldestPendingAt": _cell(report.oldest_pending_at)},
            "checks": [{"check": f.check, "invariant": f.invariant, "breaches": f.breaches,
                        "seconds": round(f.seconds, 3), "rows": f.rows}
                       for f in report.findings],
        }  # fmt: skip
        print(json.dumps(out, default=_cell, indent=2))
        return
    print_rows(
        f"audit of {report.tenant or 'every tenant'} at {_cell(report.started_at)}",
        ("check", "invariant", "breaches", "seconds"),
        [[f.check, f.invariant, str(f.breaches), f"{f.seconds:.2f}"] for f in report.findings],
    )
    for finding in report.findings:
        if finding.ok:
            continue
        columns = tuple(finding.rows[0]) if finding.rows else ("-",)
        more = finding.breaches - len(finding.rows)
        print_rows(
            f"{finding.check}: {finding.breaches} breach(es)"
            + (f", the first {len(finding.rows)} shown" if more > 0 else ""),
            columns,
            [[_cell(row.get(c)) for c in columns] for row in finding.rows],
        )
    oldest = _cell(report.oldest_pending_at)
    console.print(
        f"outbox: {report.pending} change(s) waiting for the relay (oldest {oldest}), "
        f"{report.parked} parked",
        highlight=False,
    )
    console.print("[green]every invariant holds[/green]" if report.ok
                  else f"[red]{report.breaches} breach(es)[/red]")  # fmt: skip


def _periodically(once: Any, every: float, host: str, port: int) -> None:
    from prometheus_client import Gauge, start_http_server

    breaches = Gauge(
        "handoff_audit_breaches", "Rows breaking each invariant, last audit", ["check"]
    )
    duration = Gauge("handoff_audit_duration_seconds", "How long the last audit took")
    finished = Gauge("handoff_audit_last_run_timestamp_seconds", "When the last audit ended")
    pending = Gauge("handoff_audit_outbox_pending", "Changes waiting for the relay, last audit")
    oldest = Gauge("handoff_audit_outbox_oldest_pending_age_seconds", "Age of the oldest")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    start_http_server(port, addr=host)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("auditing every %.0f s; metrics on http://%s:%d/metrics", every, host, port)
    while not stop.is_set():
        started = time.monotonic()
        try:
            report = once()
        except Exception as exc:  # the next round tries again; the metric shows the gap
            log.warning("audit failed: %s", exc)
        else:
            for finding in report.findings:
                breaches.labels(finding.check).set(finding.breaches)
            duration.set(time.monotonic() - started)
            finished.set(time.time())
            pending.set(report.pending)
            age = 0.0
            if report.oldest_pending_at is not None:
                age = max(0.0, (report.started_at - report.oldest_pending_at).total_seconds())
            oldest.set(age)
            log.info("audit: %s", "every invariant holds" if report.ok
                     else f"{report.breaches} breach(es)")  # fmt: skip
        stop.wait(every)


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
    console.print(f"last changed {_cell(found.updated_at)} by {found.updated_by}", highlight=False)


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
        float | None, typer.Option(help="Purge again every this many seconds (Ctrl-C stops).")
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
