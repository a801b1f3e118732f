"""A port a serving command cannot listen on is a message naming the option to change,
not a traceback (and, under ``handoff run``, not a crash restarted for ever)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from handoff.cli._process import serve_metrics
from handoff.core.errors import ConfigurationError


@contextmanager
def _taken() -> Iterator[int]:
    """A port another socket of this machine listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def test_a_taken_metrics_port_is_a_configuration_error() -> None:
    with _taken() as port, pytest.raises(ConfigurationError) as e:
        serve_metrics(port)
    assert re.search(re.escape(f"127.0.0.1:{port}: Address"), str(e.value))
    assert "give another --metrics-port" in str(e.value)


def test_the_sandbox_provider_on_a_taken_port_says_which(tmp_path: object) -> None:
    with _taken() as port:
        done = subprocess.run(
            [sys.executable, "-m", "handoff.cli", "sandbox-provider", "--port", str(port),
             "--data", str(tmp_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, said
    assert f"127.0.0.1:{port} (give another --port or --host): Address already in use" in said
    assert "Traceback" not in said
