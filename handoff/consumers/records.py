"""Answers recorded together: the executors of one process share their record calls.

Each executor records its provider's answer before it takes its next intent, as
before; what changes is who sends it. The first executor with an answer to
record sends every answer queued at that moment in one statement (one
transaction, one commit), and the executors whose answers went with it go on
without a call of their own [group commit]. While that statement runs, the next
answers queue behind it, so the busier the process, the more each commit
carries; an executor alone records its answer by itself, as before.

A batch that fails as a whole (a bad value, a conflict after its retries) is
sent again one answer at a time, so one answer cannot hold back the others; each
executor then meets its own answer's failure, as it would have alone. A lost
connection is every answer's failure: each stays "submitted" until its lease
runs out, and the next executor asks the provider for it (nothing is lost).

``record_later`` does not wait: an executor whose answer needs nothing after it
(no ``on_outcome``) queues it and takes its next intent. Whoever finds no record
call in flight sends what is queued, and again while more arrived meanwhile, so
no answer is left behind; each answer's ``settled`` is told how it went. Waiting
had cost each effect a record call's time, about a fifth of an executor's time at
16 executors (py-spy, 20 ms provider). What a crash loses is what the lease and
the lookup already cover: an answer not yet recorded is looked up at the
provider by its idempotency key once its lease runs out, and never sent twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from handoff.core.errors import DatabaseUnavailable

P = TypeVar("P")


@dataclass
class _Entry(Generic[P]):
    params: P
    done: bool = False
    recorded: bool = False
    error: BaseException | None = None
    # record_later's: told, once sent, whether it was recorded (False: fenced) or why not.
    settled: Callable[[bool | BaseException], None] | None = None


class RecordGroup(Generic[P]):
    """Record calls of one process's executors, sent together.

    ``record(params, send_many, send_one)``: ``send_many(batch)`` records a batch in
    one transaction and answers, in the batch's order, whether each was recorded
    (False: fenced out); ``send_one(params)`` records one by itself. Both run on the
    calling executor's own connection, one batch at a time.
    """

    def __init__(self) -> None:
        self._queue: list[_Entry[P]] = []
        self._state = threading.Lock()  # _queue
        self._calls = threading.Lock()  # one batch at a time

    def record(
        self,
        params: P,
        send_many: Callable[[list[P]], list[bool]],
        send_one: Callable[[P], bool],
    ) -> bool:
        entry = _Entry(params)
        with self._state:
            self._queue.append(entry)
        batch: list[_Entry[P]] = []
        with self._calls:
            if not entry.done:
                with self._state:
                    batch, self._queue = self._queue, []
                self._send(batch, send_many, send_one)
        self._settle(batch)
        self._pump(send_many, send_one)  # what record_later queued meanwhile
        if entry.error is not None:
            raise entry.error
        return entry.recorded

    def record_later(
        self,
        params: P,
        send_many: Callable[[list[P]], list[bool]],
        send_one: Callable[[P], bool],
        settled: Callable[[bool | BaseException], None],
    ) -> None:
        """Queue ``params`` and go on; sent by this caller now if no record call is in
        flight, else by the caller making it, who sends what queued meanwhile too."""
        with self._state:
            self._queue.append(_Entry(params, settled=settled))
        self._pump(send_many, send_one)

    def _pump(
        self, send_many: Callable[[list[P]], list[bool]], send_one: Callable[[P], bool]
    ) -> None:
        """Send what is queued, batch after batch, while no other call is in flight: the
        caller holding the call looks at the queue again when it lets go, so nothing
        queued is left behind."""
        while True:
            with self._state:
                if not self._queue:
                    return
            if not self._calls.acquire(blocking=False):
                return  # its holder sends this after its own batch
            try:
                with self._state:
                    batch, self._queue = self._queue, []
                self._send(batch, send_many, send_one)
            finally:
                self._calls.release()
            self._settle(batch)

    @staticmethod
    def _settle(batch: list[_Entry[P]]) -> None:
        for e in batch:
            if e.settled is not None:
                e.settled(e.error if e.error is not None else e.recorded)

    @staticmethod
    def _send(
        batch: list[_Entry[P]],
        send_many: Callable[[list[P]], list[bool]],
        send_one: Callable[[P], bool],
    ) -> None:
        try:
            if len(batch) == 1:
                batch[0].recorded = send_one(batch[0].params)
                return
            try:
                results = send_many([e.params for e in batch])
            except DatabaseUnavailable:
                raise
            except Exception:
                # One at a time: each answer meets its own failure, the rest are recorded.
                for e in batch:
                    try:
                        e.recorded = send_one(e.params)
                    except Exception as exc:
                        e.error = exc
                return
            for e, recorded in zip(batch, results, strict=True):
                e.recorded = recorded
        except BaseException as exc:  # every answer of the batch meets it
            for e in batch:
                e.error = e.error or exc
        finally:
            for e in batch:
                e.done = True
