"""``handoff demo``: seeds through the services' clients, serves the tracker until Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until


def test_demo_seeds_serves_and_stops_on_ctrl_c(local_stack: LocalStack, migrated: object) -> None:
    port = pick_port(18600, set())
    env = {**os.environ, "HANDOFF_HOME": str(local_stack.layout.home)}
    log = local_stack.layout.log_file("test-demo")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "handoff.stack",
                "demo",
                "--documents",
                "15",
                "--port",
                str(port),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"handoff demo exited with {proc.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_until(serving, 90), log.read_text()
        printed = log.read_text()
        assert "seeding invoices" in printed
        assert "15/15" in printed
        assert f"{url}/signin#hsvc_" in printed
        demo = json.loads((local_stack.layout.home / "demo.json").read_text())
        viewer = {"Authorization": f"Bearer {demo['credentials']['viewer']}"}
        owners = httpx.get(f"{url}/v1/owners", headers=viewer, timeout=10).json()["owners"]
        assert {"routing", "review", "finalization"} <= {o["owner"] for o in owners}
        overview = httpx.get(
            f"{url}/", cookies={"handoff_credential": demo["credentials"]["viewer"]}, timeout=10
        )
        assert overview.status_code == 200 and "Where work is" in overview.text
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    assert code == 0, log.read_text()
    assert "demo moved work" in log.read_text()
