"""``handoff audit`` and ``handoff backlog``: is the system sound, and will it catch up?"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import Annotated, Any

import typer

from handoff.cli._common import JsonOpt, _admin, cell, console, print_json, print_rows
from handoff.cli._process import long_running

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
        typer.Option(
            min=1.0,
            help="Audit again every this many seconds, exporting metrics (Ctrl-C stops).",
        ),
    ] = None,
    metrics_port: Annotated[
        int,
        typer.Option(min=1, max=65535, help="With --every: serve Prometheus metrics on this port."),
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
                       "oldestPendingAt": cell(report.oldest_pending_at)},
            "checks": [{"check": f.check, "invariant": f.invariant, "breaches": f.breaches,
                        "seconds": round(f.seconds, 3), "rows": f.rows}
                       for f in report.findings],
        }  # fmt: skip
        print(json.dumps(out, default=cell, indent=2))
        return
    print_rows(
        f"audit of {report.tenant or 'every tenant'} at {cell(report.started_at)}",
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
            [[cell(row.get(c)) for c in columns] for row in finding.rows],
        )
    oldest = cell(report.oldest_pending_at)
    console.print(
        f"outbox: {report.pending} change(s) waiting for the relay (oldest {oldest}), "
        f"{report.parked} parked",
        highlight=False,
    )
    console.print("[green]every invariant holds[/green]" if report.ok
                  else f"[red]{report.breaches} breach(es)[/red]")  # fmt: skip


def _periodically(once: Any, every: float, host: str, port: int) -> None:
    from prometheus_client import Gauge

    breaches = Gauge(
        "handoff_audit_breaches", "Rows breaking each invariant, last audit", ["check"]
    )
    duration = Gauge("handoff_audit_duration_seconds", "How long the last audit took")
    finished = Gauge("handoff_audit_last_run_timestamp_seconds", "When the last audit ended")
    pending = Gauge("handoff_audit_outbox_pending", "Changes waiting for the relay, last audit")
    oldest = Gauge("handoff_audit_outbox_oldest_pending_age_seconds", "Age of the oldest")
    stop = threading.Event()
    long_running(stop.set, port, host)
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


def backlog(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's consumers.")] = None,
    window: Annotated[
        float, typer.Option(min=1, max=3600, help="Seconds between the two measurements.")
    ] = 10.0,
    experiment: Annotated[
        bool,
        typer.Option(
            "--experiment",
            help="Measure completion capacity at increasing "
            "concurrency with --app (drains the backlog while it measures).",
        ),
    ] = False,
    app_target: Annotated[
        str | None, typer.Option("--app", help="With --experiment: the consumer, MODULE:APP.")
    ] = None,
    levels: Annotated[
        str, typer.Option(help="With --experiment: worker counts, in order.")
    ] = "1,2,4,8",
    step_seconds: Annotated[
        float, typer.Option(min=2, help="With --experiment: measured seconds per step.")
    ] = 20.0,
    show_all: Annotated[
        bool, typer.Option("--all", help="Also consumer groups with no backlog and no traffic.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """The recovery budget: arrival, completion, backlog, oldest pending age and drain time
    for the relay and each consumer (or, with --experiment, capacity per worker count)."""
    from handoff.core.settings import load_settings

    settings = load_settings()
    if experiment:
        _experiment(settings, app_target, levels, step_seconds)
        return
    from handoff.operate.backlog import brokers_line, measure

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f}"

    # First, so that a lookup that fails for a missing broker comes after the reason.
    console.print(brokers_line(settings.kafka_bootstrap), highlight=False)
    budgets = measure(settings, tenant=tenant, window_s=window,
                      progress=lambda line: console.print(line, highlight=False))  # fmt: skip
    idle = [
        b for b in budgets
        if b.name != "relay" and not (b.backlog or b.arrival_per_s or b.completion_per_s)
    ]  # fmt: skip
    if not show_all:
        budgets = [b for b in budgets if b not in idle]
    if as_json:
        print_json([{**dataclasses.asdict(b), "drain_s": b.drain_s} for b in budgets])
        return
    print_rows(
        "recovery budget (drain = backlog / (completion - arrival))",
        ("who", "backlog", "arrival /s", "completion /s", "applied /s", "oldest pending s",
         "drain time"),
        [[b.name, f"{b.backlog:,}", f"{b.arrival_per_s:,.1f}", f"{b.completion_per_s:,.1f}",
          seconds(b.work_per_s), seconds(b.oldest_age_s),
          ("no finite drain time" if b.drain_s is None else f"{b.drain_s:,.0f} s")]
         for b in budgets],
    )  # fmt: skip
    if idle and not show_all:
        console.print(f"{len(idle)} idle consumer group(s) not shown (--all shows them)")


def _experiment(settings: Any, app_target: str | None, levels: str, step_s: float) -> None:
    import os

    from handoff.cli.bootstrap import load_app
    from handoff.core.identity import Credential
    from handoff.operate.capacity import experiment

    if not app_target:
        raise typer.BadParameter("the experiment runs a consumer: --app MODULE:APP")
    try:
        counts = [int(n) for n in levels.split(",")]
    except ValueError as exc:
        raise typer.BadParameter("e.g. 1,2,4,8", param_hint="--levels") from exc
    if not counts or any(n < 1 or n > 64 for n in counts):
        raise typer.BadParameter("worker counts from 1 to 64", param_hint="--levels")
    app = load_app(app_target)
    token = os.environ.get(app.credential_env)
    if not token:
        raise typer.BadParameter(f"set {app.credential_env} to the consumer's credential")

    def say(line: str) -> None:
        console.print(line, highlight=False)

    steps = experiment(
        settings, app_target, Credential.parse(token), levels=counts, step_s=step_s, say=say
    )
    print_rows(
        f"completion capacity of {app.name} by worker count",
        ("workers", "completed /s", "gain", "quarantined", "provider trouble", "lock waits",
         "backlog left", "verdict"),
        [[str(s.workers), f"{s.completed_per_s:,.1f}",
          "-" if s.gain is None else f"{s.gain:+.0%}", str(s.quarantined),
          str(s.provider_trouble), str(s.lock_waits), f"{s.backlog_left:,}", s.verdict]
         for s in steps],
    )  # fmt: skip
