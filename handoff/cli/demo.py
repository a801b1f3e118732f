"""``handoff demo``: the sample pipeline on the local stack, with the tracker."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from handoff.cli._common import console
from handoff.cli.stack import local_stack, status_table
from handoff.core.client import HandoffClient
from handoff.core.settings import default_home, load_settings


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

    from handoff.cli import _demo_setup as d
    from handoff.deploy.supervisor import Supervisor
    from handoff.stack.layout import pick_port, port_is_free
    from handoff.stack.migrate import upgrade
    from handoff.stack.procs import wait_until

    if serve_ and not setup_only and not port_is_free(port, host):
        raise typer.BadParameter(f"{host}:{port} is in use; stop what runs there or pass --port")
    home = default_home()
    if local:
        stack = local_stack()
        console.print(status_table(stack.up()))
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

        from handoff.cli import bootstrap
        from handoff.tracker import serving

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
        app, tracker = bootstrap.tracker(settings)
        server = uvicorn.Server(serving.config(app, host, port, tracker))
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
