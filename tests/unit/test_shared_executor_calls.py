"""ClaimPool and RecordGroup (consumers/claims.py, records.py) with fake database
calls built on their interfaces: who calls, with how many, and what each executor
gets back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from handoff.consumers.claims import ClaimPool
from handoff.consumers.records import RecordGroup
from handoff.core.errors import DatabaseUnavailable


def _in_threads(n: int, work: Callable[[], Any]) -> list[Any]:
    out: list[Any] = []
    lock = threading.Lock()

    def run() -> None:
        got = work()
        with lock:
            out.append(got)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    return out


class FakeClaimsHeldOpen:
    """A fake claim call: answers up to n of its intents, the first call held until
    released, so that the other executors queue behind it."""

    def __init__(self, intents: int) -> None:
        self.left = list(range(intents))
        self.calls: list[int] = []
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self, n: int) -> list[int]:
        self.calls.append(n)
        self.entered.set()
        self.go.wait(10)
        taken, self.left = self.left[:n], self.left[n:]
        return taken


def _queued_behind_a_call(
    pool: ClaimPool[int], fake: FakeClaimsHeldOpen, queued: int
) -> list[int | None]:
    """One executor's take, its claim call held open while ``queued`` more arrive."""
    got: list[int | None] = []
    first = threading.Thread(target=lambda: got.append(pool.take(fake)))
    first.start()
    assert fake.entered.wait(5)
    others = threading.Thread(
        target=lambda: got.extend(_in_threads(queued, lambda: pool.take(fake)))
    )
    others.start()
    time.sleep(0.2)  # they queue behind the call in flight
    fake.go.set()
    first.join(5)
    others.join(5)
    return got


def test_with_a_fake_claim_one_call_serves_every_executor_waiting_and_some_ahead() -> None:
    pool: ClaimPool[int] = ClaimPool(ahead=2)
    fake = FakeClaimsHeldOpen(intents=100)
    got = _queued_behind_a_call(pool, fake, 3)
    # The first call counted its own executor and two ahead; two of the three that
    # queued behind it took those two without a call, the third called for itself.
    assert fake.calls == [3, 3]
    assert sorted(x for x in got if x is not None) == [0, 1, 2, 3]
    assert len(pool) == 2 and pool.drain() == [4, 5] and len(pool) == 0


def test_with_a_fake_claim_a_short_answer_spares_the_executors_that_waited_for_it() -> None:
    pool: ClaimPool[int] = ClaimPool(ahead=0)
    fake = FakeClaimsHeldOpen(intents=1)
    got = _queued_behind_a_call(pool, fake, 4)  # the call in flight counted one
    # One more call, for the four (it finds nothing, so none of them calls again).
    assert fake.calls == [1, 4]
    assert sorted(x for x in got if x is not None) == [0] and got.count(None) == 4


def test_with_a_fake_claim_a_failed_call_reaches_its_caller_and_the_next_calls_anew() -> None:
    pool: ClaimPool[int] = ClaimPool(ahead=1)

    def failing(n: int) -> list[int]:
        raise DatabaseUnavailable("the database is restarting")

    with pytest.raises(DatabaseUnavailable):
        pool.take(failing)
    assert pool.take(lambda n: list(range(n))) == 0 and pool.drain() == [1]


def test_a_claim_pool_refuses_a_negative_ahead() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        ClaimPool(ahead=-1)


class FakeRecorder:
    """Fake record calls: the first batch held until released; a record whose params
    is "bad" fails (a batch holding one fails whole); "fenced" is not recorded."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.go = threading.Event()

    def many(self, batch: list[str]) -> list[bool]:
        self.batches.append(list(batch))
        self._hold()
        if "bad" in batch:
            raise ValueError("a bad value in the batch")
        return [p != "fenced" for p in batch]

    def one(self, params: str) -> bool:
        self.batches.append([params])
        self._hold()
        if params == "bad":
            raise ValueError("a bad value")
        return params != "fenced"

    def _hold(self) -> None:
        self.entered.set()
        self.go.wait(10)


def _record_all(group: RecordGroup[str], fake: FakeRecorder, params: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def one(p: str) -> None:
        try:
            found[p] = group.record(p, fake.many, fake.one)
        except Exception as exc:
            found[p] = exc

    threads = [threading.Thread(target=one, args=(p,)) for p in params]
    for t in threads:
        t.start()
        time.sleep(0.05)  # the first is in flight before the rest arrive
    fake.go.set()
    for t in threads:
        t.join(10)
    return found


def test_with_fake_calls_answers_queued_behind_a_record_go_together() -> None:
    fake = FakeRecorder()
    found = _record_all(RecordGroup(), fake, ["a", "b", "fenced", "c"])
    assert fake.batches == [["a"], ["b", "fenced", "c"]]
    assert found == {"a": True, "b": True, "fenced": False, "c": True}


def test_with_fake_calls_a_failed_batch_is_sent_one_at_a_time() -> None:
    fake = FakeRecorder()
    found = _record_all(RecordGroup(), fake, ["a", "b", "bad", "c"])
    assert fake.batches == [["a"], ["b", "bad", "c"], ["b"], ["bad"], ["c"]]
    assert found["b"] is True and found["c"] is True
    assert isinstance(found["bad"], ValueError)


def test_with_fake_calls_a_lost_connection_fails_every_answer_of_its_batch() -> None:
    group: RecordGroup[str] = RecordGroup()

    def lost(batch: list[str]) -> list[bool]:
        raise DatabaseUnavailable("connection lost")

    fake = FakeRecorder()
    fake.many = lost  # type: ignore[method-assign]
    found = _record_all(group, fake, ["a", "b", "c"])
    assert found["a"] is True  # alone: sent by itself before the connection went
    assert all(isinstance(found[p], DatabaseUnavailable) for p in ("b", "c"))


def test_with_fake_calls_answers_recorded_later_do_not_wait_and_none_is_left_behind() -> None:
    """record_later: the first caller sends (and is held); the others queue and go on at
    once; when the first lets go it sends what queued meanwhile, each answer settled."""
    fake = FakeRecorder()
    group: RecordGroup[str] = RecordGroup()
    settled: dict[str, Any] = {}
    returned: list[str] = []

    def later(p: str) -> None:
        group.record_later(p, fake.many, fake.one, lambda result: settled.__setitem__(p, result))
        returned.append(p)

    first = threading.Thread(target=later, args=("a",))
    first.start()
    assert fake.entered.wait(10)  # "a" is in flight, held
    for p in ("b", "fenced", "bad"):
        later(p)  # queued behind it: back at once, nothing sent by these callers
    assert returned == ["b", "fenced", "bad"] and settled == {}
    fake.go.set()
    first.join(10)
    # "a" alone; then the three queued meanwhile, in one batch that fails on "bad",
    # then one at a time.
    assert fake.batches == [["a"], ["b", "fenced", "bad"], ["b"], ["fenced"], ["bad"]]
    assert settled["a"] is True and settled["b"] is True and settled["fenced"] is False
    assert isinstance(settled["bad"], ValueError)
    assert returned[-1] == "a"


def test_with_fake_calls_an_answer_recorded_later_behind_a_waiting_record_is_sent_too() -> None:
    """A record that waits for its answer and one that does not, queued together: the
    waiting caller's batch carries both, and each is settled as it went."""
    fake = FakeRecorder()
    group: RecordGroup[str] = RecordGroup()
    settled: dict[str, Any] = {}
    found: dict[str, Any] = {}

    def waits(p: str) -> None:
        found[p] = group.record(p, fake.many, fake.one)

    first = threading.Thread(target=waits, args=("a",))
    first.start()
    assert fake.entered.wait(10)
    group.record_later("b", fake.many, fake.one, lambda r: settled.__setitem__("b", r))
    waiting = threading.Thread(target=waits, args=("c",))
    waiting.start()
    time.sleep(0.05)  # "c" is queued behind "a" too
    fake.go.set()
    first.join(10)
    waiting.join(10)
    assert fake.batches == [["a"], ["b", "c"]]
    assert found == {"a": True, "c": True} and settled == {"b": True}
