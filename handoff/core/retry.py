"""Retrying an emit safely: the same request, the same event id, with backoff.

    receipt = retrying(lambda: client.emit(event_id=eid, ...))

The lambda rebuilds the identical request on each attempt, so a retry after
a timeout either is accepted once or returns the first attempt's receipt.
Never mint a new event id for a retry: that would be a second change.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from handoff.core.errors import OutcomeUnknown, TransientConflict, Unavailable

T = TypeVar("T")

RETRYABLE: tuple[type[Exception], ...] = (OutcomeUnknown, TransientConflict, Unavailable)


def backoff_delays(attempts: int, base_s: float, max_s: float) -> list[float]:
    """Full-jitter exponential backoff: uniform in [0, min(max, base * 2**n)]."""
    return [random.uniform(0, min(max_s, base_s * 2**n)) for n in range(attempts - 1)]


def retrying(
    call: Callable[[], T],
    *,
    attempts: int = 6,
    base_s: float = 0.05,
    max_s: float = 2.0,
    retry_on: tuple[type[Exception], ...] = RETRYABLE,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call until it succeeds, raises a non-retryable error, or attempts run out."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for delay in backoff_delays(attempts, base_s, max_s):
        try:
            return call()
        except retry_on:
            sleep(delay)
    return call()
