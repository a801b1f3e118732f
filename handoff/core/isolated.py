"""A call run in a child process of its own: if it crashes, this process does not.

For calls into native code that can end the process (a librdkafka admin
lookup against a cluster whose group coordinator is not ready ends it with
SIGSEGV) or hang past any timeout. The child is started with ``spawn`` (no
copy of the caller's threads, locks or connections), runs ``fn(*args)`` and
sends back the result or the error's text; if it dies or overruns, the
caller gets ``failure`` with what happened, and the child is killed.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from handoff.core.errors import HandoffError

T = TypeVar("T")
_SPAWN = multiprocessing.get_context("spawn")


def _child(send: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        send.send(("ok", fn(*args)))
    except Exception as exc:  # its text only: a native library's error may not pickle
        send.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        send.close()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not finish"
    if code < 0:
        return f"was ended by signal {-code}"
    return f"exited with {code}"


def call_isolated(
    fn: Callable[..., T],
    *args: Any,
    timeout_s: float,
    failure: type[HandoffError],
    what: str,
) -> T:
    """``fn(*args)`` in a child process; ``failure`` if it raises, crashes or overruns.

    ``fn`` must be importable at module level and its arguments and result picklable.
    """
    receive, send = _SPAWN.Pipe(duplex=False)
    child = _SPAWN.Process(target=_child, args=(send, fn, args), daemon=True)
    child.start()
    send.close()
    try:
        # The child's imports are part of its time: a second on a busy machine.
        if not receive.poll(timeout_s + 5.0):
            raise failure(f"{what} took longer than {timeout_s + 5.0:.0f} s")
        try:
            kind, value = receive.recv()
        except EOFError:  # it died before answering
            child.join(5)
            raise failure(f"{what}: its process {describe_exit(child.exitcode)}") from None
        if kind == "error":
            raise failure(f"{what}: {value}")
        result: T = value
        return result
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(5)
