"""A lane's units, each sent while the one before it is in the database.

A unit (one event at batch 1, a batch otherwise) is its claim, its handlers'
writes and the commit. Sent one after another, each unit waits for the one
before it to come back, so the database waits on the consumer's Python
(polling, decoding, the handlers) and the consumer waits on the database's
work and the commit's flush. Here the consumer keeps ``queue_ahead`` units
queued behind the one the database is on (core/unit_queue.py): the database
goes from one commit straight to the next unit, and the consumer makes the
next unit meanwhile. Each unit stays its own transaction. Measured on the
2-core test machine: batch 1 at 2.3x the events/s of units sent one at a
time; batches of 500 at 1.17x (decoding is then the limit); batch 1 over 4
lanes (each lane a queue of its own) at 1.4x.

A unit sent ahead claims its events with the handlers' writes, as batch 1
always did (consumer_claim): the claim refuses the whole unit unless every
event in it is to be applied now, and the unit rolls back.

What does not change:

- **Offsets**: a message's offset is stored once it and every message before
  it are through, in order. A crash with units queued redelivers them; the
  guard makes those that had committed duplicates.
- **A document's order**: a unit is not sent while one holding an event of
  the same document is still queued; it waits for that one's outcome.
- **Failures**: a unit the claim refused (a duplicate, a stale or parked event,
  a gap) is taken verdict first, as a refused claim always is; a lone event's
  unit that failed counts as its first attempt, and retries and quarantine go
  on from there; a batch that failed is taken the usual way, verdict first and
  then one event at a time (``Processor.after_queued``). The units queued
  behind a failed one are read first, so that the connection is free for it.
- **Handlers that read** in their unit (``tx.execute``, an emit that waits for
  its receipt, an effect intent or a workflow start) need the connection while
  their unit is being made: their events go the usual way, one unit after
  another (``Processor.queued_unit`` learns it once per handler). A handler
  written with ``tx.append``/``tx.write`` and ``hand_on(..., wait=False)`` is
  queued.

With tracing on, units go ahead only at a sampling ratio of 0 (a unit then
starts no trace of its own), and a unit whose events came with a trace goes
alone, so that its span and its rows continue that trace.

A handler runs before the outcome of the units ahead of it is known, as it
runs before its own claim's verdict at batch 1 (units.py ``claim_unit``): it
must not do anything outside its unit that it would regret doing twice, as
any handler whose unit may be retried.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from handoff.consumers.units import Item, Processor
from handoff.core.db import raise_if_lost
from handoff.core.wire import Statement

log = logging.getLogger("handoff.consumers")

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Sent(Generic[T]):
    items: list[Item]
    documents: set[str]
    at: float
    # Done once this unit is through: its own tag, and those of the entries with
    # nothing to run that came after it (their offsets wait for it).
    tags: list[T] = field(default_factory=list)


class QueuedLane(Generic[T]):
    """``processor``'s units, ``ahead`` queued behind the one the database is on."""

    def __init__(self, processor: Processor, ahead: int) -> None:
        self.processor = processor
        self.ahead = ahead
        self._queue = processor.unit_queue
        self._sent: deque[_Sent[T]] = deque()
        self._done: Callable[[T], None] = lambda _tag: None

    def run(self, entries: Iterable[tuple[T, list[Item]]], done: Callable[[T], None]) -> None:
        """Each entry's events through as one unit (none: nothing to run, such as a
        filtered message), then ``done(tag)``, in the entries' order. A lost connection
        raises DatabaseUnavailable; the entries not yet done are to be taken again."""
        self._done = done
        for tag, items in entries:
            self._take(tag, items)
        self._settle(0)

    def _take(self, tag: T, items: list[Item]) -> None:
        decoded = [item for item in items if item.event is not None]
        if len(decoded) < len(items):  # undecodable: quarantined the usual way, in turn
            self._settle(0)
            for item in items:
                if item.event is None:
                    self.processor.run_one(item)
        if not decoded:
            if self._sent:
                self._sent[-1].tags.append(tag)
            else:
                self._done(tag)
            return
        documents = {item.event.document_id for item in decoded if item.event is not None}
        try:
            statements = self.processor.queued_unit(decoded)
        except Exception as exc:  # a handler failed: the usual way runs it again, counted
            log.debug("%s: not sent ahead: %s", self.processor.app.name, exc)
            statements = None
        if statements is not None and any(sent.documents & documents for sent in self._sent):
            self._settle(0)  # these documents' earlier events first
        if statements is not None and self._sent_ahead(statements):
            self._sent.append(_Sent(decoded, documents, time.perf_counter(), [tag]))
            self._settle(self.ahead)
            return
        self._settle(0)
        self.processor.run_batch(decoded)  # one event: run_one
        self._done(tag)

    def _sent_ahead(self, statements: list[Statement]) -> bool:
        """Queued; False for a unit that could not be (a value that does not bind)."""
        try:
            self._queue.send(statements)
        except Exception as exc:
            raise_if_lost(self.processor.conn, exc)  # the runtime reconnects
            log.debug("%s: not sent ahead: %s", self.processor.app.name, exc)
            return False
        return True

    def _settle(self, keep: int) -> None:
        """Read outcomes, oldest first, until ``keep`` units are left queued."""
        while len(self._sent) > keep:
            sent = self._sent.popleft()
            error = self._read(self._queue.outcome)
            if error is None:
                self._through(sent, None)
                continue
            # Its usual way needs the connection: what is queued behind it is read first.
            behind = list(self._sent)
            self._sent.clear()
            errors = self._read(self._queue.outcomes)
            self._through(sent, error)
            for later, later_error in zip(behind, errors, strict=True):
                self._through(later, later_error)

    def _read(self, read: Callable[[], R]) -> R:
        try:
            return read()
        except Exception as exc:
            raise_if_lost(self.processor.conn, exc)  # the runtime reconnects
            raise

    def _through(self, sent: _Sent[T], error: Exception | None) -> None:
        self.processor.after_queued(sent.items, error, time.perf_counter() - sent.at)
        for tag in sent.tags:
            self._done(tag)
