"""Claims shared by the executors of one process.

An executor that claims on its own makes one claim transaction per effect. Each
transaction costs the database far more than its rows: measured on the 2-core
machine, a claim of one intent and the record of its answer cost the server 0.78
CPU-ms an effect, against 0.37 when four intents are claimed at a time and 0.27
at sixteen (the commit's WAL flush, the executor start of each statement of the
claim function, the round trip). So the executors of a process share their
claims: the one that calls the database claims for every executor waiting
behind it, and a few more ahead, and the others take theirs from the pool
without a call of their own.

What an intent waiting in the pool costs: its lease runs from the claim, and
the claim marked it submitted, so if the process dies before sending it, the
next executor asks the provider first (it finds nothing, and sends). That is
what a crash between a claim and its send always meant; the pool keeps at most
``ahead`` intents, and an executor takes one within a provider call's time. A
graceful stop hands what is left back (``drain``; the executors release each
as it was before the claim, effect_release in handoff/sql/effect_release.sql).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ClaimPool(Generic[T]):
    """Claimed intents for the executors of one process.

    ``take(claim)`` answers one intent or None (nothing due). ``claim(n)`` is the
    caller's own claim call for up to ``n`` intents; it runs with no other claim
    call of the pool in flight, so one executor claims while the rest wait for
    what it brings back.
    """

    def __init__(self, ahead: int) -> None:
        if ahead < 0:
            raise ValueError(f"ahead must be 0 or more, not {ahead}")
        self.ahead = ahead
        self._ready: deque[T] = deque()
        self._state = threading.Lock()  # _ready, _waiting, _started, _dry
        self._calls = threading.Lock()  # one claim call at a time
        self._waiting = 0  # executors inside take() without an intent yet
        self._started = 0  # claim calls started so far
        self._dry = -1  # the latest call that came back short (every due intent taken)

    def take(self, claim: Callable[[int], list[T]]) -> T | None:
        with self._state:
            if self._ready:
                return self._ready.popleft()
            self._waiting += 1
            arrived = self._started
        try:
            with self._calls:
                with self._state:
                    if self._ready:
                        return self._ready.popleft()
                    if self._dry >= arrived:
                        # A call that started after this executor arrived found
                        # nothing more: a call of its own would find nothing too.
                        return None
                    want = self._waiting + self.ahead
                    call = self._started
                    self._started += 1
                got = claim(want)
                with self._state:
                    if len(got) < want:
                        self._dry = call
                    self._ready.extend(got[1:])
                return got[0] if got else None
        finally:
            with self._state:
                self._waiting -= 1

    def drain(self) -> list[T]:
        """What the pool holds, taken out (a stopping process hands it back)."""
        with self._state:
            left = list(self._ready)
            self._ready.clear()
            return left

    def __len__(self) -> int:
        with self._state:
            return len(self._ready)
