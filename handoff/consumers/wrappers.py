"""Behaviour around a consumer's unit, as wrappers: claim, retry, quarantine, and others'.

watermill's router middleware is the model (``middleware/poison.go``,
``retry.go``): each is a function from a step to a step, and the Processor
(units.py) is their composition, so a caller changes what happens around
the unit by passing wrappers, never by subclassing it:

    one event:  quarantined(retried(claimed(unit)))

- ``claimed``: a lone event first takes the one-round-trip way (its claim
  and the handler's writes in one message); when the claim refuses, the
  verdict-first way decides.
- ``retried``: a failure whose class another attempt can help is tried again
  with backoff, within the delivery count and the time budget; otherwise it
  gives up (``GaveUp``, with the class and the attempts).
- ``quarantined``: an event that gave up, or could not be decoded, is set
  aside for a person, and its verdict says so.

``UnitWrapper``s wrap the unit inside its transaction (replay records each
verdict and its checkpoint there, and limits the unit's capabilities).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from handoff.consumers.failures import Category, classify, describe
from handoff.consumers.verdicts import Verdict
from handoff.core.errors import DatabaseUnavailable
from handoff.core.retry import RetryPolicy

if TYPE_CHECKING:
    from handoff.consumers.units import Item
    from handoff.core.tx import HandoffTx

log = logging.getLogger("handoff.consumers")

# A unit inside its transaction: the items, whether to reconcile past a gap.
Unit = Callable[["HandoffTx", list["Item"], bool], list[Verdict]]
UnitWrapper = Callable[[Unit], Unit]
# A batch through its own transaction(s).
Step = Callable[[list["Item"], bool], list[Verdict]]


class OneEvent(Protocol):
    """One event through, counting the deliveries already spent on it; ``failed``: the
    first of its attempts here already ran elsewhere (a queued unit, consumers/queued.py)
    and failed so."""

    def __call__(self, item: Item, spent: int, failed: Exception | None = None) -> Verdict: ...


class GaveUp(Exception):
    """No further attempt can help an event: its class, why, and the attempts made."""

    def __init__(self, category: Category, error: str, attempts: int) -> None:
        super().__init__(error)
        self.category, self.error, self.attempts = category, error, attempts


def claimed(step: Step, claim: Callable[[Item], list[Verdict] | None]) -> Step:
    """A lone, not set-aside event takes ``claim`` first; ``None`` from it (refused)
    sends it the verdict-first way, ``step``."""

    def run(items: list[Item], reconcile: bool) -> list[Verdict]:
        if len(items) == 1 and items[0].kind is None and not reconcile:
            done = claim(items[0])
            if done is not None:
                return done
        return step(items, reconcile)

    return run


def retried(
    step: Step,
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None],
    on_retry: Callable[[Item, int, Category, Exception], None],
    lost: Callable[[BaseException], None],
) -> OneEvent:
    """One event through ``step``, tried again while its failure class allows.

    ``lost(exc)`` raises when the failure is the database's (the runtime then
    reconnects and takes the batch again; that is no attempt of the event's).
    """

    def run(item: Item, spent: int, failed: Exception | None = None) -> Verdict:
        deadline = time.monotonic() + policy.budget_s
        attempts = spent
        while True:
            attempts += 1
            if failed is None:
                try:
                    return step([item], item.expired)[0]
                except DatabaseUnavailable:
                    raise
                except Exception as exc:
                    failed = exc
            lost(failed)
            category, retryable = classify(failed)
            wait = policy.delay(attempts)
            more = retryable and attempts < policy.attempts
            if more and time.monotonic() + wait <= deadline:
                on_retry(item, attempts, category, failed)
                sleep(wait)
                failed = None
                continue
            raise GaveUp(category, describe(failed), attempts) from failed

    return run


def quarantined(one: OneEvent, quarantine: Callable[[Item, Category, str, int], None]) -> OneEvent:
    """An event that cannot be decoded, or gave up, is set aside for a person."""

    def run(item: Item, spent: int, failed: Exception | None = None) -> Verdict:
        if item.malformed is not None:
            quarantine(item, Category.MALFORMED, describe(item.malformed), 1)
            return Verdict.QUARANTINED
        try:
            return one(item, spent, failed)
        except GaveUp as gave:
            quarantine(item, gave.category, gave.error, gave.attempts)
            return Verdict.QUARANTINED

    return run
