"""The one backoff policy of Handoff: exponential, full jitter, bounded attempts and time.

The API retries an emit on serialization failure, the relay waits out an
unreachable broker, a consumer retries its whole unit of work: all three
use ``RetryPolicy`` (DESIGN.md "Transactions"), so there is one schedule to
reason about and to tune.

    receipt = retrying(lambda: client.emit(event_id=eid, ...))

The lambda rebuilds the identical request on each attempt, so a retry after
a timeout either is accepted once or returns the first attempt's receipt.
Never mint a new event id for a retry: that would be a second change.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from handoff.core.errors import OutcomeUnknown, TransientConflict, Unavailable

T = TypeVar("T")

RETRYABLE: tuple[type[Exception], ...] = (OutcomeUnknown, TransientConflict, Unavailable)


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` calls at most, within ``budget_s`` seconds; waits of full jitter.

    Full jitter (a uniform wait in [0, min(max_s, base_s * 2**n)]) spreads
    the retries of callers that failed together, such as two transactions
    that deadlocked on each other, so they do not collide again in step.
    """

    attempts: int = 6
    base_s: float = 0.05
    max_s: float = 2.0
    budget_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base_s < 0 or self.max_s < 0 or self.budget_s <= 0:
            raise ValueError("base_s and max_s must be >= 0, budget_s > 0")

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failures (1 = after the first)."""
        exponent = min(max(failures - 1, 0), 62)
        return random.uniform(0, min(self.max_s, self.base_s * 2**exponent))

    def run(
        self,
        call: Callable[[], T],
        *,
        retry_on: tuple[type[Exception], ...] = RETRYABLE,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> T:
        """Call until it succeeds, raises a non-retryable error, or attempts or time run out."""
        deadline = clock() + self.budget_s
        for failures in range(1, self.attempts + 1):
            try:
                return call()
            except retry_on:
                wait = self.delay(failures)
                if failures == self.attempts or clock() + wait > deadline:
                    raise
                sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def run_async(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        retry_on: tuple[type[Exception], ...] = RETRYABLE,
    ) -> T:
        """``run`` for coroutines: the waits do not block the event loop."""
        deadline = time.monotonic() + self.budget_s
        for failures in range(1, self.attempts + 1):
            try:
                return await call()
            except retry_on:
                wait = self.delay(failures)
                if failures == self.attempts or time.monotonic() + wait > deadline:
                    raise
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover


# A conflict between two transactions clears in milliseconds: short waits,
# many attempts. The API, the direct client and consumers' units use it.
CONFLICTS = RetryPolicy(attempts=10, base_s=0.002, max_s=0.5, budget_s=10.0)


def backoff_delays(attempts: int, base_s: float, max_s: float) -> list[float]:
    """The waits ``RetryPolicy`` would use between ``attempts`` calls."""
    policy = RetryPolicy(attempts=attempts, base_s=base_s, max_s=max_s)
    return [policy.delay(n) for n in range(1, attempts)]


def retrying(
    call: Callable[[], T],
    *,
    attempts: int = 6,
    base_s: float = 0.05,
    max_s: float = 2.0,
    budget_s: float = 60.0,
    retry_on: tuple[type[Exception], ...] = RETRYABLE,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call until it succeeds, raises a non-retryable error, or attempts run out."""
    policy = RetryPolicy(attempts=attempts, base_s=base_s, max_s=max_s, budget_s=budget_s)
    return policy.run(call, retry_on=retry_on, sleep=sleep)
