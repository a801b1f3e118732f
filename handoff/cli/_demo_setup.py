"""``handoff demo``: the sample invoice pipeline, event-driven, with the tracker.

intake -> relay -> routing -> review / senior-review -> finalization (pays
through the effect ledger against the sandbox provider) -> paid. Each
service is its own process with its own credential (handoff/samples),
supervised by the engine of ``handoff run``, from a deployment file the demo
writes to ``<home>/demo/deployment.toml`` for users to read and run
themselves. Credentials are kept in ``<home>/demo.json`` (0600) and reused.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from handoff.core.client import HandoffClient
from handoff.core.errors import AlreadyExists, ConflictingEventReuse, ServiceExists
from handoff.core.identity import Credential
from handoff.core.services import add_service, has_credential
from handoff.core.settings import HandoffSettings
from handoff.deploy.deployment import Deployment, load
from handoff.samples.intake import Intake

log = logging.getLogger("handoff.demo")

SERVICES = ("intake", "routing", "review", "senior-review", "finalization", "viewer")
# The consumer processes: (process name, app in handoff.samples.invoices, extra arguments)
CONSUMERS: tuple[tuple[str, str, list[str]], ...] = (
    ("routing", "routing", []),
    ("review", "review", []),
    ("senior-review", "senior_review", []),
    ("finalization", "finalization", ["--executors", "2"]),
)
# Each consumer's /metrics port, as deploy/prometheus/prometheus.yml scrapes them.
METRICS_PORTS = {"routing": 9401, "review": 9402, "senior-review": 9403, "finalization": 9404}
# The README's example document; it waits at review, version 7.
WALKTHROUGH = "invoice-42"
WALKTHROUGH_NOTES = ("amounts", "tax ids", "bank details", "purchase order", "signatures")


@dataclass
class DemoCredentials:
    tenant: str
    credentials: dict[str, str]
    next_number: int = 1001

    @property
    def viewer(self) -> Credential:
        return Credential.parse(self.credentials["viewer"])


def _load(path: Path) -> DemoCredentials | None:
    try:
        raw = json.loads(path.read_text())
        return DemoCredentials(raw["tenant"], raw["credentials"], raw.get("next_number", 1001))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(path: Path, demo: DemoCredentials) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "tenant": demo.tenant,
                "credentials": demo.credentials,
                "next_number": demo.next_number,
            },
            indent=2,
        )
    )


def demo_services(settings: HandoffSettings, home: Path) -> DemoCredentials:
    """The demo tenant's services: reused when still registered, else registered anew."""
    path = home / "demo.json"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        known = _load(path)
        if known and all(
            name in known.credentials
            and has_credential(conn, Credential.parse(known.credentials[name]), known.tenant)
            for name in SERVICES
        ):
            return known
        # "demo" unless it is taken (by an earlier demo whose credentials this
        # home does not have, or an older demo's services): then a tenant of our own.
        for tenant in ("demo", f"demo-{uuid.uuid4().hex[:6]}"):
            try:
                creds = {
                    name: add_service(conn, name, tenant=tenant, can_create=name == "intake").token
                    for name in SERVICES
                }
                break
            except ServiceExists:
                continue
        else:
            raise ServiceExists("no free tenant for the demo's services")
    demo = DemoCredentials(tenant, creds, known.next_number if known else 1001)
    _save(path, demo)
    return demo


def credential_variable(service: str) -> str:
    return f"HANDOFF_DEMO_{service.upper().replace('-', '_')}_CREDENTIAL"


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def write_deployment(
    home: Path,
    settings: HandoffSettings,
    *,
    sandbox_port: int,
    tracker_port: int,
    sandbox_host: str = "127.0.0.1",
) -> Path:
    """The pipeline as a deployment file; credentials stay in the environment.

    ``sandbox_host`` is where the other processes reach the sandbox provider:
    loopback when they share a machine, a host name when each runs in its own
    container (docker compose); the provider then listens on every interface.
    """
    bind = [] if sandbox_host in ("127.0.0.1", "localhost") else ["--host", "0.0.0.0"]
    folder = home / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "# The sample invoice pipeline (handoff demo). Run it yourself with",
        "#   handoff run " + str(folder / "deployment.toml"),
        "# with HANDOFF_DEMO_<SERVICE>_CREDENTIAL set from " + str(home / "demo.json") + ".",
        "",
        "[env]",
        f"HANDOFF_DATABASE_URL = {json.dumps(settings.database_url)}",
        f"HANDOFF_KAFKA_BOOTSTRAP = {json.dumps(settings.kafka_bootstrap)}",
        f"HANDOFF_SCHEMA_REGISTRY_URL = {json.dumps(settings.schema_registry_url)}",
        f"HANDOFF_HOME = {json.dumps(str(home))}",
        f'HANDOFF_SANDBOX_URL = "http://{sandbox_host}:{sandbox_port}"',
        "",
        "[[process]]",
        'name = "sandbox"',
        "handoff = " + _toml_list(["sandbox-provider", *bind, "--port", str(sandbox_port),
                                   "--data", str(folder / "sandbox"), "--latency-ms", "20"]),
        "",
        "[[process]]",
        'name = "relay"',
        'handoff = ["relay"]',
    ]  # fmt: skip
    metrics = ["--metrics-host", "0.0.0.0"] if bind else []
    for name, attr, extra in CONSUMERS:
        command = ["consume", f"handoff.samples.invoices:{attr}", *extra,
                   "--metrics-port", str(METRICS_PORTS[name]), *metrics]  # fmt: skip
        lines += [
            "",
            "[[process]]",
            f'name = "{name}"',
            "handoff = " + _toml_list(command),
            f'env = {{ HANDOFF_CONSUMER_CREDENTIAL = "${{{credential_variable(name)}}}" }}',
        ]
    lines += [
        "",
        "[[process]]",
        'name = "intake"',
        'exec = ["python", "-m", "handoff.samples.intake"]',
        f'env = {{ HANDOFF_INTAKE_CREDENTIAL = "${{{credential_variable("intake")}}}" }}',
        "",
        "[[process]]",
        'name = "tracker"',
        "handoff = " + _toml_list(["serve", "--port", str(tracker_port)]),
        "",
    ]
    path = folder / "deployment.toml"
    path.write_text("\n".join(lines))
    return path


def write_credentials(home: Path, demo: DemoCredentials) -> Path:
    """The services' credentials as an env file for ``handoff run --env-file`` (mode 0600)."""
    path = home / "demo" / "credentials.env"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    lines = [f"{credential_variable(s)}={demo.credentials[s]}" for s in SERVICES]
    path.write_text("# handoff demo: one credential per service; keep this file private\n"
                    + "\n".join(lines) + "\n")  # fmt: skip
    return path


def load_deployment(path: Path, demo: DemoCredentials, *, with_tracker: bool) -> Deployment:
    import os
    import sys

    for service in SERVICES:
        os.environ[credential_variable(service)] = demo.credentials[service]
    found = load(path)
    for spec in found.process:
        if spec.exec and spec.exec[0] == "python":
            spec.exec[0] = sys.executable  # the demo's own interpreter
    if not with_tracker:
        found.process = [p for p in found.process if p.name != "tracker"]
    return found


def seed(intake: Intake, count: int, console: Console) -> int:
    """``count`` invoices at routing, one in seven due within two minutes."""
    columns = (TextColumn("seeding invoices"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    made = 0
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("seed", total=count)
        while made < count:
            if intake.create(due_soon=made % 7 == 0) is not None:
                made += 1
                bar.advance(task)
    return made


def walkthrough(
    intake: Intake, review: HandoffClient, settings: HandoffSettings, tenant: str,
    *, timeout_s: float = 120.0,
) -> bool:  # fmt: skip
    """``invoice-42`` at review, version 7, so the README's example works as written:
    created by intake, routed by the routing consumer, then five notes by review.
    False if an earlier demo made it."""
    try:
        created = intake.create(document_id=WALKTHROUGH, amount=4200.0)
    except (AlreadyExists, ConflictingEventReuse):
        return False
    if created is None:
        return False
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT owner, version FROM handoff.document_state"
                " WHERE tenant_id = %s AND document_id = %s AND run_id = 1",
                (tenant, WALKTHROUGH),
            ).fetchone()
            if row == ("review", 2):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"routing did not route {WALKTHROUGH} within {timeout_s:.0f} s")
            time.sleep(0.3)
    for version, note in enumerate(WALKTHROUGH_NOTES, start=2):
        review.emit(
            event_id=f"{WALKTHROUGH}-progress-{version}",
            event_type="progress",
            document_id=WALKTHROUGH,
            next_owner="review",
            status=f"waiting for review (checked the {note})",
            expected_version=version,
        )
    return True


def summary(settings: HandoffSettings, tenant: str) -> dict[str, Any]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        waiting: dict[str, int] = dict(
            conn.execute(
                "SELECT owner, count(*) FROM handoff.document_state"
                " WHERE tenant_id = %s AND owner IS NOT NULL GROUP BY owner ORDER BY owner",
                (tenant,),
            ).fetchall()
        )
        row = conn.execute(
            "SELECT count(*) FROM handoff.document_state WHERE tenant_id = %s AND owner IS NULL",
            (tenant,),
        ).fetchone()
    return {"waiting": waiting, "finished": row[0] if row else 0}


def make_intake(demo: DemoCredentials, settings: HandoffSettings, home: Path,
                sandbox_port: int) -> Intake:  # fmt: skip
    client = HandoffClient.direct(demo.credentials["intake"], settings.database_url, pool_size=1)
    return Intake(client, home / "demo.json", f"http://127.0.0.1:{sandbox_port}", random.Random(42))
