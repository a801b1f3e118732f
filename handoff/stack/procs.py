"""Background processes of the local stack: start detached, find again, stop.

A part's process is "ours" only if its pid file names a live process whose
command line carries ``-Dhandoff.home=<this home>``. ``down`` stops nothing
else, so a developer's stack and CI's fresh clone on the same machine never
stop each other's parts, and a recycled pid is never killed by mistake.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from handoff.core.errors import ServiceStartFailed


def home_marker(home: Path) -> str:
    return f"-Dhandoff.home={home}"


def spawn(
    cmd: list[str],
    *,
    log: Path,
    pid_file: Path,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
) -> int:
    """Start ``cmd`` detached (see ``_detach``) so it outlives the caller; record its pid.

    ``user``: the OS user to run it as (the caller is then root)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting ===\n".encode())
    done = subprocess.run(
        [sys.executable, "-m", "handoff.stack._detach", str(log), str(cwd)]
        + ([user] if user else [])
        + ["--", *cmd],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise ServiceStartFailed(f"could not launch {cmd[0]}: {done.stderr.strip()}")
    pid = int(done.stdout)
    pid_file.write_text(str(pid))
    return pid


def running_pid(pid_file: Path, marker: str) -> int | None:
    """The recorded pid if that process is alive and is ours, else None."""
    try:
        pid = int(pid_file.read_text().strip())
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if marker in proc.cmdline():
            return pid
    except (FileNotFoundError, ValueError, psutil.Error):
        pass
    return None


def stop_pid(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM (clean shutdown), then SIGKILL after ``timeout_s``."""
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout_s)
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    except psutil.NoSuchProcess:
        pass


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def log_tail(log: Path, lines: int = 25) -> str:
    if not log.exists():
        return "(no log written)"
    with log.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 16_384))
        text = f.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
