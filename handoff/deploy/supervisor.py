"""``handoff run``: the processes of a deployment, supervised.

Each process runs in its own session (a Ctrl-C reaches the supervisor only,
which then stops the processes itself, in the reverse of the start order,
so consumers stop before the relay and the provider they use). A process
that exits while it should run is started again after a backoff that grows
while it keeps failing and starts over once it has stayed up. Every line a
process prints goes to one view, prefixed with its name, and to its own log
file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from handoff.core.retry import RetryPolicy
from handoff.deploy.deployment import Deployment, ProcessSpec

# Backoff between restarts: 0.5 s doubling to 30 s; a process up this long
# counts as healthy again.
RESTARTS = RetryPolicy(attempts=1_000_000, base_s=0.5, max_s=30.0, budget_s=10**9)
HEALTHY_AFTER_S = 30.0
COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies, however it dies.

    The children run in sessions of their own (so the supervisor, not the
    terminal, decides the order they stop in), which also means a supervisor
    killed with SIGKILL would leave them running. Only a pre-resolved libc
    call runs here: no lock another thread could hold is taken.
    """
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    spec: ProcessSpec
    copy: int  # from 0: which of the spec's count (its ports are moved up by it)
    label: str
    colour: str
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    failures: int = 0
    restarts: int = 0
    due_at: float = 0.0  # when to start again, after an exit
    done: bool = False  # exited for good (restart = never, or on-failure after a clean exit)
    readers: list[threading.Thread] = field(default_factory=list)

    def argv(self) -> list[str]:
        command = self.spec.command(self.copy)
        if self.spec.handoff is not None:
            return [sys.executable, "-m", "handoff.cli", *command]
        return command


class Supervisor:
    def __init__(
        self,
        deployment: Deployment,
        logs: Path,
        say: Callable[[str, str, str], None],
    ) -> None:
        """``say(label, colour, line)`` prints one line of the combined view."""
        self.deployment, self.logs, self.say = deployment, logs, say
        self.children: list[Child] = []
        for index, spec in enumerate(deployment.process):
            for n in range(spec.count):
                colour = COLOURS[index % len(COLOURS)]
                self.children.append(Child(spec, n, spec.label(n), colour))
        self.stopping = threading.Event()
        logs.mkdir(parents=True, exist_ok=True)

    def note(self, text: str) -> None:
        self.say("run", "bold", text)

    # -- one child ---------------------------------------------------------------------

    def _start(self, child: Child) -> None:
        env = {**os.environ, **self.deployment.env, **child.spec.environment(child.copy),
               "PYTHONUNBUFFERED": "1", "HANDOFF_RUN_PROCESS": child.label}  # fmt: skip
        try:
            child.proc = subprocess.Popen(
                child.argv(),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
            )
        except OSError as exc:  # a program that is not there: a failure like an exit
            self.note(f"{child.label}: cannot start {child.argv()[0]}: {exc.strerror}")
            child.proc = None
            self._exited(child, 127)
            return
        child.started_at = time.monotonic()
        log = (self.logs / f"run-{child.label}.log").open("ab")
        reader = threading.Thread(
            target=self._pump, args=(child, child.proc.stdout, log), daemon=True
        )
        reader.start()
        child.readers.append(reader)
        self.note(f"{child.label}: started (pid {child.proc.pid})")

    def _pump(self, child: Child, stream: IO[bytes] | None, log: IO[bytes]) -> None:
        assert stream is not None
        with log, stream:
            for raw in stream:
                log.write(raw)
                log.flush()
                self.say(child.label, child.colour, raw.decode(errors="replace").rstrip("\n"))

    def _exited(self, child: Child, code: int) -> None:
        child.proc = None
        if self.stopping.is_set():
            return
        up = time.monotonic() - child.started_at if child.started_at else 0.0
        policy = child.spec.restart
        if policy == "never" or (policy == "on-failure" and code == 0):
            child.done = True
            self.note(f"{child.label}: exited with {code}; not restarted (restart = {policy})")
            return
        child.failures = 1 if up >= HEALTHY_AFTER_S else child.failures + 1
        wait = RESTARTS.delay(child.failures) + 0.2 * min(child.failures, 5)
        child.due_at = time.monotonic() + wait
        child.restarts += 1
        self.note(f"{child.label}: exited with {code} after {up:.1f} s; restarting in {wait:.1f} s")

    # -- all of them -------------------------------------------------------------------

    def run(self, *, for_s: float | None = None) -> int:
        """Run until stopped (``stop()``, or after ``for_s``); the exit status."""
        for child in self.children:
            if self.stopping.is_set():
                break
            self._start(child)
        ends = time.monotonic() + for_s if for_s is not None else None
        while not self.stopping.wait(0.2):
            now = time.monotonic()
            for child in self.children:
                if child.proc is not None:
                    code = child.proc.poll()
                    if code is not None:
                        self._exited(child, code)
                elif not child.done and child.due_at and now >= child.due_at:
                    child.due_at = 0.0
                    self._start(child)
            if all(child.done for child in self.children):
                self.note("every process has exited")
                break
            if ends is not None and now >= ends:
                break
        self.shutdown()
        return 0

    def stop(self) -> None:
        self.stopping.set()

    def shutdown(self) -> None:
        """Stop the processes in the reverse of the start order, each given its time."""
        self.stopping.set()
        for child in reversed(self.children):
            proc = child.proc
            if proc is None or proc.poll() is not None:
                continue
            self.note(f"{child.label}: stopping")
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(child.spec.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.note(f"{child.label}: still running after "
                          f"{child.spec.stop_timeout_s:.0f} s; killed")  # fmt: skip
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            except ProcessLookupError:
                pass
            self.note(f"{child.label}: stopped ({proc.returncode})")
        for child in self.children:
            for reader in child.readers:
                reader.join(5)
