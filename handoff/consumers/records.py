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
        with self._calls:
            if not entry.done:
                with self._state:
                    batch, self._queue = self._queue, []
                self._send(batch, send_many, send_one)
        if entry.error is not None:
            raise entry.error
        return entry.recorded

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
