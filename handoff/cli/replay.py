"""``handoff replay``: plan, approve, run, stop, resume a bounded replay; its record."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer

from handoff.cli._common import JsonOpt, _admin, cell, console, print_json, print_rows
from handoff.cli._process import setup_logging

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
    as_json: JsonOpt = False,
) -> None:
    """Write a manifest: the positions (resolved now), scope, capabilities, rate, stop.

    Prints its revision on stdout (the JSON manifest with --json), for a script to
    approve exactly that revision; what to do next goes to stderr."""
    from handoff.cli.bootstrap import load_app
    from handoff.consumers.settings import ConsumerSettings
    from handoff.core.db import on_citus
    from handoff.core.settings import load_settings
    from handoff.operate import replay
    from handoff.operate import replay_sql as q
    from handoff.operate.manifest import Manifest, Positions, parse_range

    app = load_app(app_target)
    settings = load_settings()
    chosen = topic or ConsumerSettings().topics[0]
    start, end = _when(since, "--since"), _when(until, "--until")
    with _admin() as conn, Positions(settings.kafka_bootstrap, chosen) as positions:
        if range_:
            ranges = positions.explicit([parse_range(r) for r in range_])
        else:
            if event_id and start is None and end is None:
                window = q.CITUS_ID_WINDOW if on_citus(conn) else q.ID_WINDOW
                found = conn.execute(window, {"tenant": tenant, "ids": event_id}).fetchone()
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
    if as_json:
        print_json(
            {
                "name": name,
                "state": state,
                "revision": manifest.revision,
                "records": manifest.records,
                "manifest": manifest.model_dump(mode="json"),
            }
        )
    else:
        print(manifest.revision)
    console.print(
        f"plan [bold]{name}[/bold] revision [bold]{manifest.revision}[/bold] ({state}): "
        f"up to {manifest.records} record(s) of {chosen} in {len(ranges)} partition range(s).\n"
        f"Read it (handoff replay show {name}), then: handoff replay approve {name} "
        f"--revision {manifest.revision}",
        highlight=False,
    )


@replay_app.command("show")
def replay_show(name: PlanArg, as_json: JsonOpt = False) -> None:
    """The manifest, its revision and approval, the checkpoint and the audit trail."""
    from handoff.operate import replay

    with _admin() as conn:
        found = replay.status(conn, name)
    plan, m = found.plan, found.plan.manifest
    row = plan.row
    if as_json:
        print_json({"name": name, "revision": m.revision, "status": plan.status,
                    "records": m.records, "manifest": m.model_dump(mode="json"),
                    "approvedRevision": row["approved_revision"],
                    "approvedBy": row["approved_by"], "approvedAt": row["approved_at"],
                    "checkpoint": row["checkpoint"], "audit": found.audit})  # fmt: skip
        return
    print_rows(
        f"replay plan {name}, revision {m.revision}",
        ("field", "value"),
        [[k, cell(v)] for k, v in m.model_dump(mode="json").items() if k != "ranges"]
        + [["ranges", ", ".join(f"{r.partition}:{r.start}-{r.end}" for r in m.ranges)],
           ["records in ranges", str(m.records)], ["status", plan.status],
           ["approved", f"{row['approved_revision'] or '-'} by {row['approved_by'] or '-'} "
                        f"at {cell(row['approved_at'])}"],
           ["checkpoint (next offsets)", json.dumps(row["checkpoint"])]],
    )  # fmt: skip
    print_rows("audit trail", ("at", "actor", "action", "revision", "detail"),
               [[cell(a["at"]), a["actor"], a["action"], cell(a["revision"]),
                 cell(a["detail"])] for a in found.audit])  # fmt: skip


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
    from handoff.cli.bootstrap import load_app
    from handoff.core.settings import load_settings
    from handoff.operate import replay

    setup_logging()
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
def replay_status(name: PlanArg, as_json: JsonOpt = False) -> None:
    """Completed, duplicate-suppressed, quarantined, unresolved and excluded records, and
    whether they reconcile to the authorised input set."""
    from handoff.operate import replay

    with _admin() as conn:
        found = replay.status(conn, name)
    m = found.plan.manifest
    if as_json:
        print_json({"name": name, "status": found.plan.status, "revision": m.revision,
                    "outcomes": found.outcomes, "accounted": found.accounted,
                    "skipped": found.skipped, "missingIds": found.missing_ids,
                    "reconciled": found.reconciled,
                    "reconciliationOwner": m.reconciliation_owner})  # fmt: skip
        return
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


@replay_app.command("record")
def replay_record(name: PlanArg) -> None:
    """The event recovery record of a plan (markdown on stdout; blanks for people to fill)."""
    from handoff.operate import replay
    from handoff.operate.record import render
    from handoff.operate.retention import current

    with _admin() as conn:
        text = render(replay.status(conn, name), current(conn))
    print(text, end="")
