"""What every part of the local stack can do, and how ``status`` reports it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from handoff.core.errors import ServiceStartFailed
from handoff.stack.layout import Layout, StackState
from handoff.stack.procs import log_tail, wait_until


@dataclass(frozen=True)
class PartStatus:
    name: str
    address: str
    pid: int | None
    problem: str | None  # None when healthy
    role: str | None = None  # what the node is in its cluster, when it is one of several

    @property
    def healthy(self) -> bool:
        return self.pid is not None and self.problem is None


class Part(ABC):
    """One process of the stack. ``prepare`` may download; ``start`` does not wait."""

    name: str

    def __init__(self, layout: Layout, state: StackState, console: Console) -> None:
        self.layout = layout
        self.state = state
        self.console = console

    @property
    def log(self) -> Path:
        return self.layout.log_file(self.name)

    @abstractmethod
    def address(self) -> str: ...

    @abstractmethod
    def pid(self) -> int | None:
        """Pid of this home's process for the part, if it is running."""

    @abstractmethod
    def prepare(self) -> None:
        """Resolve binaries and initialise storage; idempotent."""

    @abstractmethod
    def start(self) -> None:
        """Launch the process without waiting for it to be ready."""

    @abstractmethod
    def problem(self) -> str | None:
        """None if the part answers as it should, else what is wrong (quick probe)."""

    @abstractmethod
    def stop(self) -> None: ...

    def needs_start(self) -> bool:
        """Whether ``up`` must launch it (nothing of this home's runs for it)."""
        return self.pid() is None

    def role(self) -> str | None:
        """The node's place in its cluster (leader, standby, ...); None for a lone part.
        Asked only right after ``problem`` found the part healthy."""
        return None

    def status(self) -> PartStatus:
        pid = self.pid()
        problem = self.problem() if pid is not None else "not running"
        role = self.role() if problem is None else None
        return PartStatus(self.name, self.address(), pid, problem, role)

    def wait_healthy(self, timeout_s: float) -> None:
        last: list[str | None] = [None]

        def ready() -> bool:
            if self.pid() is None:
                raise ServiceStartFailed(
                    f"{self.name} exited while starting; last lines of {self.log}:\n"
                    + log_tail(self.log)
                )
            last[0] = self.problem()
            return last[0] is None

        if not wait_until(ready, timeout_s):
            raise ServiceStartFailed(
                f"{self.name} was not healthy after {timeout_s:.0f} s ({last[0]}); "
                f"last lines of {self.log}:\n{log_tail(self.log)}\n"
                "Raise HANDOFF_STACK_START_TIMEOUT_S on a slow machine."
            )
