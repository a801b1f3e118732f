"""Zipkin's server as a local process: the real trace backend that the tracing test
and ``handoff bench tracing`` export to (OpenTelemetry's Zipkin exporter) and read
traces back from. In-memory storage: a trace lives as long as the process.

Not part of ``handoff stack up``: tracing is off unless asked for, and a user with a
trace backend points ``HANDOFF_OTEL_*`` at theirs (README "Tracing").
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from rich.console import Console

from handoff.core.errors import ServiceStartFailed
from handoff.stack.artifacts import zipkin_server
from handoff.stack.java import find_java
from handoff.stack.layout import pick_port
from handoff.stack.procs import wait_until

ZIPKIN_VERSION = "3.6.1"


class ZipkinServer:
    """``java -jar zipkin-server.jar`` on a free port, stopped on exit."""

    def __init__(self, cache_dir: Path, log: Path, console: Console | None = None) -> None:
        self.cache_dir, self.log = cache_dir, log
        self.console = console or Console(stderr=True)
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 120) -> str:
        """Its base URL, once ``/health`` answers."""
        jar = zipkin_server(self.cache_dir, ZIPKIN_VERSION, self.console)
        java = find_java(17, None, "Zipkin's server")
        port = pick_port(19411, set())
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(
                [str(java), "-Xms64m", "-Xmx384m", "-jar", str(jar)],
                env={**os.environ, "QUERY_PORT": str(port), "STORAGE_TYPE": "mem"},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.url = f"http://127.0.0.1:{port}"
        if not wait_until(self._healthy, timeout_s, 0.5):
            self.stop()
            raise ServiceStartFailed(
                f"Zipkin's server did not answer /health in {timeout_s:.0f} s; see {self.log}"
            )
        return self.url

    def _healthy(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise ServiceStartFailed(
                f"Zipkin's server exited with {self._proc.returncode}:\n{tail}"
            )
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)

    def env(self, sample_ratio: float = 1.0) -> dict[str, str]:
        """What a Handoff process needs to trace into this server (a ``sample_ratio``
        of new traces), exporting every 200 ms rather than every 5 s."""
        return {
            "HANDOFF_OTEL_EXPORTER": "zipkin",
            "HANDOFF_OTEL_SAMPLE_RATIO": str(sample_ratio),
            "OTEL_EXPORTER_ZIPKIN_ENDPOINT": f"{self.url}/api/v2/spans",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans it holds of one trace (none yet: empty)."""
        answer = httpx.get(f"{self.url}/api/v2/trace/{trace_id}", timeout=10)
        if answer.status_code == 404:
            return []
        answer.raise_for_status()
        spans: list[dict[str, Any]] = answer.json()
        return spans

    def span_count(self) -> int:
        """Spans received so far (Zipkin's own metric), to tell an exporter kept up."""
        answer = httpx.get(f"{self.url}/prometheus", timeout=10)
        answer.raise_for_status()
        for line in answer.text.splitlines():
            if line.startswith("zipkin_collector_spans_total") and 'transport="http"' in line:
                return int(float(line.rpartition(" ")[2]))
        return 0

    def __enter__(self) -> ZipkinServer:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
