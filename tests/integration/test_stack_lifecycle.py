"""The stack's CLI: status, env, idempotent up, and a registry that keeps its schemas."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from handoff.core.settings import HandoffSettings
from handoff.stack.layout import StackSettings
from handoff.stack.local import LocalStack

HANDOFF = [sys.executable, "-m", "handoff.cli"]


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HANDOFF_HOME": str(home)}
    return subprocess.run(
        [*HANDOFF, *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def test_status_reports_every_part_healthy(local_stack: LocalStack) -> None:
    done = run_cli("stack", "status", home=local_stack.layout.home)
    assert done.returncode == 0, done.stderr
    for part in ("postgres", "kafka", "registry"):
        line = next(line for line in done.stderr.splitlines() if f" {part} " in line)
        assert "healthy" in line


def test_env_prints_shell_ready_settings(
    local_stack: LocalStack, settings: HandoffSettings
) -> None:
    done = run_cli("stack", "env", home=local_stack.layout.home)
    assert done.returncode == 0, done.stderr
    shell = subprocess.run(
        [
            "bash",
            "-c",
            f'{done.stdout}\necho "$HANDOFF_KAFKA_BOOTSTRAP|$HANDOFF_SCHEMA_REGISTRY_URL"',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.strip() == f"{settings.kafka_bootstrap}|{settings.schema_registry_url}"
    assert f"HANDOFF_DATABASE_URL={settings.database_url}" in done.stdout.replace("'", "")


def test_up_is_idempotent_and_reuses_running_parts(local_stack: LocalStack) -> None:
    before = {s.name: s.pid for s in local_stack.status()}
    done = run_cli("stack", "up", home=local_stack.layout.home)
    assert done.returncode == 0, done.stderr
    after = {s.name: s.pid for s in local_stack.status()}
    assert before == after and all(after.values())


@pytest.mark.slow
def test_registry_restart_keeps_schema_ids(
    local_stack: LocalStack, settings: HandoffSettings
) -> None:
    subject = f"restart-{uuid.uuid4().hex[:8]}-value"
    schema = Schema('{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}', "AVRO")
    with SchemaRegistryClient({"url": settings.schema_registry_url, "timeout": 10}) as client:
        schema_id = client.register_schema(subject, schema)
    old_pid = local_stack.registry.pid()

    local_stack.down(["registry"])
    assert local_stack.registry.pid() is None
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{settings.schema_registry_url}/subjects", timeout=2)
    local_stack.up(["registry"])
    assert local_stack.registry.pid() not in (None, old_pid)

    with SchemaRegistryClient(
        {"url": settings.schema_registry_url, "timeout": 10}
    ) as fresh:  # empty cache
        assert fresh.get_latest_version(subject).schema_id == schema_id
        assert fresh.get_schema(schema_id).schema_str.replace(" ", "") == schema.schema_str


@pytest.mark.slow
def test_second_stack_in_a_private_folder_runs_beside_the_first(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    # CI clones into a mktemp folder (mode 0700) on a machine where a
    # developer's stack may already hold the default ports.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    home = private / ".handoff"
    try:
        done = run_cli("stack", "up", "postgres", home=home)
        assert done.returncode == 0, done.stderr
        second = LocalStack(StackSettings(home=home), console=local_stack.console)
        assert second.postgres.status().healthy
        assert second.state.ports.postgres != local_stack.state.ports.postgres
        assert local_stack.postgres.status().healthy
    finally:
        run_cli("stack", "down", home=home)
    assert local_stack.postgres.status().healthy  # down stopped only its own parts


def test_a_citus_stack_without_citus_says_how_to_get_it_and_starts_nothing(
    tmp_path: Path,
) -> None:
    """make test runs without Citus (it is on no package registry): asked for, the stack
    fails with the ways to get it rather than starting a server without it."""
    env = {k: v for k, v in os.environ.items() if k != "HANDOFF_STACK_CITUS_SOURCE"}
    env |= {"HANDOFF_HOME": str(tmp_path / "home"), "COLUMNS": "300",
            "HANDOFF_STACK_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    done = subprocess.run(
        [*HANDOFF, "stack", "up", "--citus", "2"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert "Citus was not found" in done.stderr and "HANDOFF_STACK_CITUS_SOURCE" in done.stderr
    assert not list((tmp_path / "home").glob("*/data/postmaster.pid"))
