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

from handoff.stack.cli_common import YesOpt, _admin, _confirm, console, print_rows

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


replay_app = typer.Typer(
    no_args_is_help=True,
    help="Replay an approved, bounded set of records through a consumer: plan, show, "
    "approve, run, status, stop, resume.",
)
PlanArg = Annotated[str, typer.Argument(help="The plan's name.")]
AppOpt = Annotated[str, typer.Option("--app", help="The consumer app, as MODULE:APP.")]


def _who(by: str | None) -> str:
    import getpass

    return by or getpass.getuser()


def _when(value: str | None, what: str) -> datetime | None:
    from datetime import UTC

    if not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint=what) from exc
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


@replay_app.command("plan")
def replay_plan(
    name: PlanArg,
    app_target: AppOpt,
    tenant: Annotated[str, typer.Option(help="The tenant whose records are replayed.")],
    failure_class: Annotated[
        str, typer.Option(help="What went wrong, e.g. handler_error (the quarantine category).")
    ],
    expected_effect: Annotated[
        str, typer.Option(help="What the replay should bring about, in words.")
    ],
    owner: Annotated[str, typer.Option(help="Who reconciles the outcome (a person or team).")],
    topic: Annotated[str | None, typer.Option(help="Default: the consumer's topic.")] = None,
    range_: Annotated[
        list[str] | None,
        typer.Option("--range", help="PARTITION:START-END (END included; START- to the end)."),
    ] = None,
    since: Annotated[str | None, typer.Option(help="Records from this time (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option(help="Records before this time.")] = None,
    event_id: Annotated[
        list[str] | None, typer.Option("--event-id", help="Only these events (repeat).")
    ] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Event ids to leave out.")] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            help="An external capability the replay may use: an effect name, or "
            "workflow:NAME. None unless listed."
        ),
    ] = None,
    rate: Annotated[float, typer.Option(min=0.01, max=10_000, help="Records per second.")] = 50.0,
    stop_when_quarantined: Annotated[
        int | None, typer.Option(min=1, help="Stop when this many records were quarantined.")
    ] = None,
    stop_when_unresolved: Annotated[
        int | None, typer.Option(min=1, help="Stop when this many are unresolved.")
    ] = None,
    by: Annotated[str | None, typer.Option(help="Who plans it (default: login).")] = None,
) -> None:
    """Write a manifest: the positions (resolved now), scope, capabilities, rate, stop."""
    from handoff.consumers.settings import ConsumerSettings
    from handoff.core.settings import load_settings
    from handoff.operate import replay
    from handoff.operate import replay_sql as q
    from handoff.operate.manifest import Manifest, Positions, parse_range
    from handoff.stack.cli_consumers import load_app

    app = load_app(app_target)
    settings = load_settings()
    chosen = topic or ConsumerSettings().topics[0]
    start, end = _when(since, "--since"), _when(until, "--until")
    with _admin() as conn, Positions(settings.kafka_bootstrap, chosen) as positions:
        if range_:
            ranges = positions.explicit([parse_range(r) for r in range_])
        else:
            if event_id and start is None and end is None:
                found = conn.execute(q.ID_WINDOW, {"tenant": tenant, "ids": event_id}).fetchone()
                if not found or found[0] == 0:
                    raise typer.BadParameter(
                        "none of these event ids is in the outbox any more; give --since and "
                        "--until around them", param_hint="--event-id")  # fmt: skip
                from datetime import timedelta

                start, end = found[1] - timedelta(minutes=1), found[2] + timedelta(minutes=1)
            if start is None and end is None:
                raise typer.BadParameter("say what to replay: --range, --since/--until or "
                                         "--event-id")  # fmt: skip
            ranges = positions.between(start, end)
        manifest = Manifest(
            tenant=tenant, consumer=app.name, topic=chosen, ranges=ranges, since=start,
            until=end, event_ids=sorted(set(event_id)) if event_id else None,
            excluded=sorted(set(exclude or [])), failure_class=failure_class,
            handler_revision=replay.handler_revision(app), expected_effect=expected_effect,
            allowed_capabilities=sorted(set(allow or [])), rate=rate,
            stop_when_quarantined=stop_when_quarantined,
            stop_when_unresolved=stop_when_unresolved, reconciliation_owner=owner,
        )  # fmt: skip
        state = replay.save(conn, name, manifest, _who(by))
    console.print(
        f"plan [bold]{name}[/bold] revision [bold]{manifest.revision}[/bold] ({state}): "
        f"up to {manifest.records} record(s) of {chosen} in {len(ranges)} partition range(s).\n"
        f"Read it (handoff replay show {name}), then: handoff replay approve {name} "
        f"--revision {manifest.revision}",
        highlight=False,
    )


@replay_app.command("show")
def replay_show(name: PlanArg) -> None:
    """The manifest, its revision and approval, the checkpoint and the audit trail."""
    from handoff.operate import replay

    with _admin() as conn:
        found = replay.status(conn, name)
    plan, m = found.plan, found.plan.manifest
    row = plan.row
    print_rows(
        f"replay plan {name}, revision {m.revision}",
        ("field", "value"),
        [[k, _cell(v)] for k, v in m.model_dump(mode="json").items() if k != "ranges"]
        + [["ranges", ", ".join(f"{r.partition}:{r.start}-{r.end}" for r in m.ranges)],
           ["records in ranges", str(m.records)], ["status", plan.status],
           ["approved", f"{row['approved_revision'] or '-'} by {row['approved_by'] or '-'} "
                        f"at {_cell(row['approved_at'])}"],
           ["checkpoint (next offsets)", json.dumps(row["checkpoint"])]],
    )  # fmt: skip
    print_rows("audit trail", ("at", "actor", "action", "revision", "detail"),
               [[_cell(a["at"]), a["actor"], a["action"], _cell(a["revision"]),
                 _cell(a["detail"])] for a in found.audit])  # fmt: skip


@replay_app.command("approve")
def replay_approve(
    name: PlanArg,
    revision: Annotated[str, typer.Option(help="The revision you read (handoff replay show).")],
    by: Annotated[str | None, typer.Option(help="Who approves (default: login).")] = None,
) -> None:
    """Approve exactly the revision you read; a changed plan needs approving again."""
    from handoff.operate import replay

    with _admin() as conn:
        replay.approve(conn, name, revision, _who(by))
    console.print(f"plan {name} revision {revision} approved by {_who(by)}", highlight=False)


def _run(name: str, app_target: str, resume: bool) -> None:
    from handoff.core.settings import load_settings
    from handoff.operate import replay
    from handoff.stack.cli_consumers import load_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    runner = replay.Replayer(load_settings(), load_app(app_target), name,
                             say=lambda line: console.print(line, highlight=False))  # fmt: skip
    result = runner.run(resume=resume)
    console.print(
        f"replay {name}: {result.status}"
        + (f" ({result.reason})" if result.reason else "")
        + f"; this run: {result.counts or 'nothing'}. handoff replay status {name} reconciles.",
        highlight=False,
    )
    raise typer.Exit(0 if result.status == "completed" else 3)


@replay_app.command("run")
def replay_run(name: PlanArg, app_target: AppOpt) -> None:
    """Run an approved plan (exit 0 completed, 3 stopped)."""
    _run(name, app_target, resume=False)


@replay_app.command("resume")
def replay_resume(name: PlanArg, app_target: AppOpt) -> None:
    """Continue a stopped plan from its checkpoint; nothing is applied twice."""
    _run(name, app_target, resume=True)


@replay_app.command("stop")
def replay_stop(
    name: PlanArg, by: Annotated[str | None, typer.Option(help="Who (default: login).")] = None
) -> None:
    """Ask a running plan to stop; it does within a second, at a checkpoint."""
    from handoff.operate import replay

    with _admin() as conn:
        replay.request_stop(conn, name, _who(by))
    console.print(f"stop requested for {name}", highlight=False)


@replay_app.command("status")
def replay_status(name: PlanArg) -> None:
    """Completed, duplicate-suppressed, quarantined, unresolved and excluded records, and
    whether they reconcile to the authorised input set."""
    from handoff.operate import replay

    with _admin() as conn:
        found = replay.status(conn, name)
    m = found.plan.manifest
    rows = [
        [k, str(found.outcomes.get(k, 0))]
        for k in ("completed", "duplicate", "quarantined", "unresolved", "excluded")
    ]
    rows.append(["total accounted", str(found.accounted)])
    if m.event_ids is not None:
        rows.append(["event ids authorised", str(len(set(m.event_ids)))])
    rows += [[f"skipped: {cap}", str(n)] for cap, n in found.skipped.items()]
    print_rows(f"replay {name} ({found.plan.status}), revision {m.revision}",
               ("records", "count"), rows)  # fmt: skip
    if found.missing_ids:
        console.print(f"[red]not found in the ranges[/red]: {', '.join(found.missing_ids)}")
    verdict = ("reconciled: every authorised record has one outcome" if found.reconciled
               else "not reconciled yet" if found.plan.status != "completed"
               else "[red]not reconciled[/red]")  # fmt: skip
    console.print(verdict + f"; reconciliation owner: {m.reconciliation_owner}")


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
) -> None:
    """The recovery budget: arrival, completion, backlog, oldest pending age and drain time
    for the relay and each consumer (or, with --experiment, capacity per worker count)."""
    from handoff.core.settings import load_settings

    settings = load_settings()
    if experiment:
        _experiment(settings, app_target, levels, step_seconds)
        return
    from handoff.operate.backlog import measure

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f}"

    budgets = measure(settings, tenant=tenant, window_s=window,
                      progress=lambda line: console.print(line, highlight=False))  # fmt: skip
    idle = [b for b in budgets[1:] if not (b.backlog or b.arrival_per_s or b.completion_per_s)]
    if not show_all:
        budgets = [b for b in budgets if b not in idle]
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

    from handoff.core.identity import Credential
    from handoff.operate.capacity import experiment
    from handoff.stack.cli_consumers import load_app

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


@replay_app.command("record")
def replay_record(name: PlanArg) -> None:
    """The event recovery record of a plan (markdown on stdout; blanks for people to fill)."""
    from handoff.operate import replay
    from handoff.operate.record import render
    from handoff.operate.retention import current

    with _admin() as conn:
        text = render(replay.status(conn, name), current(conn))
    print(text, end="")


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
                   columns, [[_cell(r[c]) for c in columns] for r in found.sample])  # fmt: skip
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
               [[p["name"], _cell(p.get("topic")), _cell(p.get("tenant_id")),
                 _cell(p.get("events")), _cell(p.get("finished_at")), _cell(p.get("differences")),
                 "yes" if p["name"] == used else ""] for p in found])  # fmt: skip


@projection_app.command("drop")
def projection_drop(name: ProjectionArg, yes: YesOpt = False) -> None:
    """Drop a projection's schema (not the one readers use)."""
    from handoff.operate.projection import drop

    _confirm(f"Drop projection {name} and its schema?", yes)
    with _admin() as conn:
        drop(conn, name)
    console.print(f"projection {name} dropped")


def dynamodb_relay(
    table: Annotated[str, typer.Option(help="The AWS design's table.")] = "handoff",
    topic: Annotated[str, typer.Option(help="Kafka topic, as the relay's.")] = "handoff.events",
    once: Annotated[bool, typer.Option("--once", help="Publish what is there, then stop.")] = False,
    every: Annotated[float, typer.Option(min=0.05, help="Seconds between reads.")] = 0.5,
) -> None:
    """Publish the DynamoDB table's stream to Kafka as the relay publishes the outbox
    (HANDOFF_DYNAMODB_URL names the endpoint; handoff stack up --with dynamodb sets it)."""

    from handoff.core.settings import load_settings
    from handoff.dynamo.streams import StreamReader
    from handoff.stack.dynamodb import client

    settings = load_settings()
    url = settings.dynamodb_url
    if not url:
        raise typer.BadParameter("set HANDOFF_DYNAMODB_URL (handoff stack up --with dynamodb)")
    reader = StreamReader(settings, client(url), client(url, "dynamodbstreams"),
                          table=table, topic=topic)  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
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

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from handoff.core.settings import load_settings
    from handoff.dynamo.porting import import_table
    from handoff.stack.dynamodb import client

    settings = load_settings()
    url = settings.dynamodb_url
    if not url:
        raise typer.BadParameter("set HANDOFF_DYNAMODB_URL (handoff stack up --with dynamodb)")
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console) as bar:  # fmt: skip
        task = bar.add_task("scanning", total=None)

        def progress(n: int) -> None:
            bar.update(task, description=f"{n:,} item(s) scanned")

        found = import_table(client(url), settings.database_url, table,
                             segments=segments, progress=progress)  # fmt: skip
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
