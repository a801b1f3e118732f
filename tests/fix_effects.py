"""Pytest plugin: a real sandbox provider process, and the rehearsal's scratch tenant."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from handoff.core.settings import HandoffSettings
from handoff.rehearsal.rows import Rehearsal
from handoff.stack.procs import wait_until
from tests.fix_contract import answers_healthz


class SandboxProcess:
    """``handoff sandbox-provider`` on a free port, with its records in ``data``."""

    def __init__(self, data: Path, log: Path, *, latency_ms: int = 0) -> None:
        self.data, self.log, self.latency_ms = data, log, latency_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0

    def start(self) -> SandboxProcess:
        args = [
            sys.executable, "-m", "handoff.cli", "sandbox-provider",
            "--port", str(self.port), "--data", str(self.data),
            "--latency-ms", str(self.latency_ms),
        ]  # fmt: skip
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().decode().strip()
        assert self.url.startswith("http://"), self.log.read_text()[-2000:]
        self.port = int(self.url.rsplit(":", 1)[1])
        assert wait_until(self.healthy, 20), "the sandbox provider did not answer"
        return self

    def healthy(self) -> bool:
        return answers_healthz(self.url)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None

    def payments(self, reference: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/v1/payments", params={"reference": reference}, timeout=10)
        answer.raise_for_status()
        return list(answer.json()["payments"])

    def arm(self, **fault: Any) -> None:
        httpx.post(f"{self.url}/_sandbox/faults", json=fault, timeout=10).raise_for_status()


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    folder = tmp_path_factory.mktemp("sandbox")
    proc = SandboxProcess(folder / "data", folder / "sandbox.log").start()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def rehearsal(
    migrated: HandoffSettings, sandbox: SandboxProcess, tenant: str
) -> Iterator[Rehearsal]:
    found = Rehearsal(migrated, sandbox.url, tenant=tenant)
    try:
        yield found
    finally:
        found.close()


def env_for(settings: HandoffSettings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "HANDOFF_DATABASE_URL": settings.database_url,
        "HANDOFF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "HANDOFF_SCHEMA_REGISTRY_URL": settings.schema_registry_url,
        **extra,
    }
