"""The built wheel, installed into a fresh virtualenv outside the checkout, runs
``handoff db upgrade`` (on a new database), ``schemas check``, ``serve`` (with
its offline /docs) and ``relay`` against the test stack: the migrations and
the event schemas ship as package data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bin/`` of a fresh venv with only the built wheel (and its dependencies) in it."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"  # a copy, so that the build leaves nothing in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "handoff", source / "handoff", ignore=shutil.ignore_patterns("__pycache__")
    )
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(work / "dist"),
            str(source),
        ]
    )
    (wheel,) = (work / "dist").glob("handoff-*.whl")
    run([sys.executable, "-m", "venv", str(work / "venv")])
    run([str(work / "venv" / "bin" / "pip"), "install", "-q", str(wheel)])
    return work / "venv" / "bin"


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args[:4]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_installed_wheel_runs_outside_the_checkout(
    installed: Path, fresh_database: str, migrated: HandoffSettings, tmp_path: Path
) -> None:
    env = {
        "PATH": f"{installed}:{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "HANDOFF_HOME": str(tmp_path / "home"),  # no stack.env there: only these settings
        "HANDOFF_DATABASE_URL": fresh_database,
        "HANDOFF_KAFKA_BOOTSTRAP": migrated.kafka_bootstrap,
        "HANDOFF_SCHEMA_REGISTRY_URL": migrated.schema_registry_url,
        "HANDOFF_RELAY_DEFAULT_TOPIC": f"test.wheel.{uuid.uuid4().hex[:8]}",
        "COLUMNS": "300",
    }
    handoff = str(installed / "handoff")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run([handoff, *args], cwd=tmp_path, env=env)

    assert "database at head" in cli("db", "upgrade").stderr
    assert "schemas ok" in cli("schemas", "check").stderr
    credential = Credential.parse(
        cli("service", "add", "intake", "--can-create", "--tenant", "wheel")
        .stdout.strip()
        .splitlines()[-1]
    )
    port = pick_port(18700, set())
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [handoff, "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            served = (tmp_path / "serve.log").read_text()[-3000:]
            pytest.fail(f"the installed handoff serve did not start:\n{served}")
        created = httpx.post(
            base + "/v1/documents",
            json={"eventId": "e1", "documentId": "invoice-42", "owner": "intake", "status": "new"},
            headers={"Authorization": f"Bearer {credential.token}"},
        )
        assert created.status_code == 201, created.text
        assert httpx.get(base + "/static-offline-docs/swagger-ui-bundle.js").status_code == 200
    finally:
        server.terminate()
        server.wait(15)
        log.close()
    assert "relay published 1 events" in cli("relay", "--once").stderr
