"""The ``handoff`` command line."""

from __future__ import annotations

import shlex
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from handoff.core.client import HandoffClient
from handoff.core.errors import HandoffError
from handoff.core.settings import default_home, load_settings
from handoff.stack.cli_audit import audit, backlog
from handoff.stack.cli_common import JsonOpt, YesOpt, _admin, _confirm, console, print_json
from handoff.stack.cli_consumers import consume, quarantine_app
from handoff.stack.cli_data import projection_app, retention_app
from handoff.stack.cli_dynamodb import dynamodb_relay, export_app, import_app
from handoff.stack.cli_effects import effects_app, rehearse, sandbox_provider
from handoff.stack.cli_replay import replay_app
from handoff.stack.cli_run import run

if TYPE_CHECKING:
    from handoff.stack.local import LocalStack
    from handoff.stack.part import PartStatus

app = typer.Typer(no_args_is_help=True, help="Handoff: explicit service ownership of work.")
stack_app = typer.Typer(no_args_is_help=True, help="The local stack: PostgreSQL, Kafka, registry.")
db_app = typer.Typer(no_args_is_help=True, help="Database migrations.")
app.add_typer(stack_app, name="stack")
app.add_typer(db_app, name="db")
service_app = typer.Typer(no_args_is_help=True, help="Services and their credentials.")
app.add_typer(service_app, name="service")
schemas_app = typer.Typer(no_args_is_help=True, help="The Avro event schemas in schemas/.")
app.add_typer(schemas_app, name="schemas")
app.add_typer(quarantine_app, name="quarantine")
app.command("consume")(consume)
app.add_typer(effects_app, name="effects")
app.command("audit")(audit)
app.add_typer(retention_app, name="retention")
app.add_typer(replay_app, name="replay")
app.command("backlog")(backlog)
app.add_typer(projection_app, name="projection")
app.command("dynamodb-relay")(dynamodb_relay)
app.add_typer(import_app, name="import")
app.add_typer(export_app, name="export")
app.command("sandbox-provider")(sandbox_provider)
app.command("rehearse")(rehearse)
app.command("run")(run)

PartsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Parts to act on: postgres, kafka, registry, dynamodb (default: the first three; "
        "down: all that run)."
    ),
]


def _stack() -> LocalStack:
    from handoff.stack.local import LocalStack

    return LocalStack(console=console)


def _status_table(statuses: list[PartStatus]) -> Table:
    table = Table(title="Handoff local stack")
    for column in ("part", "address", "pid", "health"):
        table.add_column(column)
    for s in statuses:
        health = "[green]healthy[/green]" if s.healthy else f"[red]{s.problem}[/red]"
        table.add_row(s.name, s.address, str(s.pid or "-"), health)
    return table


@stack_app.command("up")
def stack_up(
    parts: PartsArg = None,
    with_: Annotated[
        list[str] | None,
        typer.Option("--with", help="Also start an optional part: dynamodb (the AWS twin)."),
    ] = None,
) -> None:
    """Start the stack (idempotent): reuse running parts, start the rest, wait until healthy."""
    from handoff.stack.local import OPTIONAL_PARTS, PART_NAMES

    unknown = set(with_ or []) - set(OPTIONAL_PARTS)
    if unknown:
        raise typer.BadParameter(f"{', '.join(sorted(unknown))}: the optional parts are "
                                 f"{', '.join(OPTIONAL_PARTS)}", param_hint="--with")  # fmt: skip
    statuses = _stack().up([*(parts or PART_NAMES), *(with_ or [])])
    console.print(_status_table(statuses))
    console.print('Point tools at it with: eval "$(handoff stack env)"')


@stack_app.command("down")
def stack_down(parts: PartsArg = None) -> None:
    """Stop the parts this project's stack started (nothing else)."""
    from handoff.stack.local import OPTIONAL_PARTS, PART_NAMES

    stopped = _stack().down(parts or (*PART_NAMES, *OPTIONAL_PARTS))
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@stack_app.command("status")
def stack_status() -> None:
    """Each part, its address and health. Exits 1 unless all are healthy."""
    statuses = _stack().status()
    console.print(_status_table(statuses))
    if not all(s.healthy for s in statuses):
        raise typer.Exit(1)


@stack_app.command("env")
def stack_env() -> None:
    """Shell-ready settings of the stack: eval "$(handoff stack env)"."""
    for key, value in _stack().env().items():
        print(f"export {key}={shlex.quote(value)}")


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to the configured database (HANDOFF_DATABASE_URL)."""
    from handoff.stack.migrate import upgrade

    upgrade(load_settings(), revision)
    console.print(f"database at {revision}")


@service_app.command("add")
def service_add(
    name: Annotated[str, typer.Argument(help="Service name, e.g. review (a-z, 0-9, . _ -).")],
    can_create: Annotated[
        bool, typer.Option("--can-create", help="May create documents (initial assignment).")
    ] = False,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant the service acts in.")] = (
        "default"
    ),
) -> None:
    """Register a service; its credential is printed once, as the last line."""
    from handoff.core.services import add_service

    with _admin() as conn:
        credential = add_service(conn, name, tenant=tenant, can_create=can_create)
    console.print(
        f"service {name!r} in tenant {tenant!r}"
        + (" (may create documents)" if can_create else "")
        + f"; database role {credential.role}. Keep this credential secret:"
    )
    print(credential.token)


ServiceArg = Annotated[str, typer.Argument(help="The service's name.")]
TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant the service acts in.")]


@service_app.command("list")
def service_list(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant (default: all).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Registered services: tenant, role, whether they may create, state, documents owned."""
    import dataclasses

    from handoff.core.services import list_services

    with _admin() as conn:
        found = list_services(conn, tenant)
    if as_json:
        print_json([dataclasses.asdict(s) for s in found])
        return
    table = Table(title="Handoff services")
    for column in ("tenant", "service", "role", "creates", "state", "owns", "created"):
        table.add_column(column)
    for s in found:
        if s.revoked_at:
            state = f"[red]revoked {s.revoked_at:%Y-%m-%d %H:%M}[/red]"
        elif s.rotated_at:
            state = f"rotated {s.rotated_at:%Y-%m-%d %H:%M}"
        else:
            state = "active"
        table.add_row(
            s.tenant, s.name, s.role, "yes" if s.can_create else "no", state,
            str(s.assigned), f"{s.created_at:%Y-%m-%d %H:%M}",
        )  # fmt: skip
    console.print(table)
    console.print(f"{len(found)} service(s)")


@service_app.command("rotate")
def service_rotate(name: ServiceArg, tenant: TenantOpt = "default") -> None:
    """New credential, both ways at once (HTTP secret and database password); printed last.

    The old credential stops working and its open database sessions end.
    Also lifts a revocation.
    """
    from handoff.core.services import rotate_service

    with _admin() as conn:
        credential = rotate_service(conn, name, tenant=tenant)
    console.print(
        f"service {name!r} in tenant {tenant!r} has a new credential; the old one no longer "
        "works. Keep this one secret:"
    )
    print(credential.token)


@service_app.command("revoke")
def service_revoke(name: ServiceArg, tenant: TenantOpt = "default", yes: YesOpt = False) -> None:
    """Block the service's credential both ways at once (rotate issues a new one)."""
    from handoff.core.services import revoke_service

    _confirm(f"Revoke the credential of {name!r} in tenant {tenant!r}?", yes)
    with _admin() as conn:
        ended = revoke_service(conn, name, tenant=tenant)
    console.print(
        f"revoked {name!r} in tenant {tenant!r}: its HTTP secret and database login no longer "
        f"work ({ended} open session(s) ended). `handoff service rotate {name}` issues a new one."
    )


@service_app.command("remove")
def service_remove(name: ServiceArg, tenant: TenantOpt = "default", yes: YesOpt = False) -> None:
    """Unregister a service and drop its role; refused while it owns documents."""
    from handoff.core.services import remove_service

    _confirm(f"Remove service {name!r} from tenant {tenant!r}?", yes)
    with _admin() as conn:
        remove_service(conn, name, tenant=tenant)
    console.print(f"removed {name!r} from tenant {tenant!r}")


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    pool_size: Annotated[int, typer.Option(help="Database connections.")] = 16,
) -> None:
    """Serve the HTTP API (emits, queries, metrics) and the tracker's web UI at /."""
    from handoff.tracker import serving
    from handoff.tracker.app import create_app
    from handoff.tracker.settings import TrackerSettings

    tracker = TrackerSettings()
    console.print(
        f"Handoff tracker on http://{host}:{port}  (web UI: /, API docs: /docs); "
        "sign in with any service credential of the tenant to look at"
    )
    serving.serve(create_app(pool_size=pool_size, tracker=tracker), host, port, tracker)


@app.command("relay")
def relay(
    once: Annotated[bool, typer.Option("--once", help="Drain what is pending, then exit.")] = False,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on this port.")
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(help="Interface for the metrics (0.0.0.0 inside a container).")
    ] = "127.0.0.1",
) -> None:
    """Publish committed outbox rows to Kafka (run several for availability)."""
    import logging
    import signal

    from prometheus_client import start_http_server

    from handoff.relay.relay import Relay
    from handoff.relay.settings import RelaySettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "httpx2"):  # one line per registry request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    worker = Relay(load_settings(), RelaySettings())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop())
    if metrics_port is not None:
        start_http_server(metrics_port, addr=metrics_host)
    count = worker.run(once=once)
    console.print(f"relay published {count} events")


@schemas_app.command("check")
def schemas_check() -> None:
    """Fail if the newest event schema cannot read data of every retained version."""
    from handoff.core.events import retained_versions
    from handoff.core.schema_compat import problems

    versions = retained_versions()
    found = problems(versions)
    for problem in found:
        console.print(f"[red]incompatible[/red]: {problem}")
    if found:
        raise typer.Exit(1)
    console.print(
        f"schemas ok: v{versions[-1].version} reads "
        + ", ".join(f"v{v.version}" for v in versions)
        + " (BACKWARD_TRANSITIVE)"
    )


@app.command(
    "bench",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def bench(ctx: typer.Context) -> None:
    """Run the side-by-side benchmarks (make bench); arguments go to python -m benchmarks."""
    import subprocess
    from pathlib import Path

    # The benchmarks are not part of the installed package: they run from a
    # checkout (make bench), which is the current directory.
    root = Path.cwd()
    if not (root / "benchmarks" / "__main__.py").exists():
        console.print(
            f"[red]error[/red]: no benchmarks/ in {root}; run it from a Handoff checkout "
            "(make bench)"
        )
        raise typer.Exit(2)
    done = subprocess.run([sys.executable, "-m", "benchmarks", *ctx.args], cwd=root, check=False)
    raise typer.Exit(done.returncode)


@app.command("demo")
def demo(
    documents: Annotated[
        int, typer.Option(min=1, max=100_000, help="Invoices to seed before serving.")
    ] = 120,
    host: Annotated[str, typer.Option(help="Interface for the tracker.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Tracker port.")] = 8000,
    serve_: Annotated[
        bool,
        typer.Option(
            "--serve/--no-serve",
            help="Serve the tracker until Ctrl-C; --no-serve seeds, lets the pipeline run "
            "for --settle seconds and stops.",
        ),
    ] = True,
    settle: Annotated[
        float, typer.Option(min=0, help="With --no-serve: seconds the pipeline runs on.")
    ] = 20.0,
    local: Annotated[
        bool,
        typer.Option(
            "--local-stack/--no-local-stack",
            help="Start the local stack first; --no-local-stack uses the HANDOFF_* settings "
            "as they are (docker compose).",
        ),
    ] = True,
    setup_only: Annotated[
        bool,
        typer.Option(
            "--setup-only",
            help="Migrate, register the services, write the deployment file and a credentials "
            "env file, and stop: the processes are then run elsewhere (docker compose runs "
            "each with handoff run --only NAME --env-file …).",
        ),
    ] = False,
    sandbox_host: Annotated[
        str,
        typer.Option(help="Host name the pipeline reaches the sandbox provider at."),
    ] = "127.0.0.1",
) -> None:
    """Stack up, migrate, run the event-driven sample pipeline and serve the tracker."""
    import logging
    import signal
    import threading

    from rich.markup import escape

    from handoff.stack import demo as d
    from handoff.stack.layout import pick_port, port_is_free
    from handoff.stack.local import PART_NAMES
    from handoff.stack.migrate import upgrade
    from handoff.stack.procs import wait_until
    from handoff.stack.supervisor import Supervisor

    if serve_ and not setup_only and not port_is_free(port, host):
        raise typer.BadParameter(f"{host}:{port} is in use; stop what runs there or pass --port")
    home = default_home()
    if local:
        stack = _stack()
        console.print(_status_table(stack.up(PART_NAMES)))
        home = stack.layout.home
    settings = load_settings(home)
    upgrade(settings)
    services = d.demo_services(settings, home)
    sandbox_port = 8900 if setup_only else pick_port(8900, {port})
    path = d.write_deployment(
        home, settings, sandbox_port=sandbox_port, tracker_port=port, sandbox_host=sandbox_host
    )
    if setup_only:
        secrets = d.write_credentials(home, services)
        console.print(
            f"Demo tenant [bold]{services.tenant}[/bold] is set up. Run its processes with\n"
            f"  handoff run {path} --env-file {secrets}\n"
            f"or one of them with --only NAME. Viewer credential for the tracker:\n"
            f"  {services.credentials['viewer']}",
            highlight=False,
            soft_wrap=True,
        )
        return
    deployment = d.load_deployment(path, services, with_tracker=False)
    console.print(
        f"Demo tenant [bold]{services.tenant}[/bold]: intake → routing → review | "
        "senior-review → finalization (pays at the sandbox provider) → paid; "
        f"processes from {path}",
        highlight=False,
    )
    lock = threading.Lock()

    def say(label: str, colour: str, line: str) -> None:
        with lock:
            console.print(f"[{colour}]{label:>13} |[/{colour}] {escape(line)}", highlight=False)

    logging.getLogger("httpx").setLevel(logging.WARNING)  # the intake's fault requests
    supervisor = Supervisor(deployment, home / "logs", say)
    runner = threading.Thread(target=supervisor.run, name="demo-supervisor", daemon=True)
    runner.start()
    intake = d.make_intake(services, settings, home, sandbox_port)
    review = HandoffClient.direct(services.credentials["review"], settings.database_url)
    try:
        import httpx

        def sandbox_up() -> bool:
            try:
                return httpx.get(f"{intake.sandbox_url}/healthz", timeout=2).is_success
            except httpx.HTTPError:
                return False

        if not wait_until(sandbox_up, 30):
            raise typer.Exit(1)
        d.seed(intake, documents, console)
        console.print("waiting for routing to route invoice-42…")
        if d.walkthrough(intake, review, settings, services.tenant):
            console.print("invoice-42 is waiting at review, version 7 (the README's example)")
        state = d.summary(settings, services.tenant)
        console.print(
            "waiting: " + ", ".join(f"{n} at {owner}" for owner, n in state["waiting"].items())
            + f"; {state['finished']} paid",
            highlight=False,
        )  # fmt: skip
        if not serve_:
            console.print(
                f"Sign in to the tracker with the viewer credential:\n  "
                f"{services.credentials['viewer']}",
                highlight=False,
                soft_wrap=True,
            )
            time.sleep(settle)
            return
        import uvicorn

        from handoff.tracker import serving
        from handoff.tracker.app import create_app
        from handoff.tracker.settings import TrackerSettings

        url = f"http://{host}:{port}"
        console.print(f"\n[bold]Tracker[/bold]  {url}   (API docs: {url}/docs)")
        console.print(
            f"Sign in with the viewer credential (this link does it for you):\n"
            f"  {url}/signin#{services.credentials['viewer']}",
            highlight=False,
            soft_wrap=True,
        )
        for reviewer in ("review", "senior-review"):
            console.print(
                f"To approve as {reviewer}: {url}/signin#{services.credentials[reviewer]}",
                highlight=False,
                soft_wrap=True,
            )
        console.print(
            "Invoices keep arriving; small ones are approved and paid by the pipeline, "
            "larger ones wait for a reviewer. Stop with Ctrl-C (the stack keeps running; "
            "make down stops it)."
        )
        # The server runs off the main thread, so uvicorn leaves the signals
        # to us: it would re-raise a Ctrl-C after its own shutdown and end
        # this process before the pipeline's processes are stopped.
        tracker = TrackerSettings()
        server = uvicorn.Server(
            serving.config(create_app(settings, tracker=tracker), host, port, tracker)
        )
        served = threading.Thread(target=server.run, name="tracker", daemon=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        served.start()
        while not stop.wait(0.5) and served.is_alive():
            pass
        server.should_exit = True
        served.join(30)
    finally:
        review.close()
        intake.client.close()
        supervisor.stop()
        runner.join(120)


def main() -> None:
    from handoff.core.db import login_problem

    try:
        app()
    except HandoffError as exc:
        console.print(f"[red]error[/red] ({exc.code}): {exc}", highlight=False)
        sys.exit(1)
    except Exception as exc:
        problem = login_problem(exc)  # a failed connection is a setting to fix
        if problem is None:
            raise
        console.print(f"[red]error[/red] ({problem.code}): {problem}", highlight=False)
        sys.exit(1)
    except ValidationError as exc:
        console.print(f"[red]invalid setting[/red]: {exc}", highlight=False)
        sys.exit(2)
