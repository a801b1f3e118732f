"""The relay's cursor: the bound it proves from each fetch's snapshot, never past a late commit."""

from __future__ import annotations

from handoff.relay.cursor import NOT_OWNED, Cursor


def _bounds(cursor: Cursor) -> list[int]:
    return [int(v) for v in cursor.bounds().strip("{}").split(",")]


def test_the_bound_waits_for_the_transactions_that_held_the_ids() -> None:
    cursor = Cursor({0: 100, 1: 100})
    # Fetch 1: ids up to 500 handed out; its rows 101..103 go in flight.
    batch = cursor.fetched(90, 95, 500, [101, 102, 103], full=False)
    assert batch is not None and cursor.value == 100
    # Fetch 2 (a newer snapshot, xmax 99): every holder of an id <= 500 is below 99.
    cursor.fetched(96, 99, 510, [], full=False)
    # Fetch 3: xmin 98 < 99, one may still be running: no proof yet.
    cursor.fetched(98, 101, 520, [], full=False)
    cursor.settled(batch, [])
    assert cursor.value == 100 and cursor.unconfirmed
    # Fetch 4: xmin 99, all of them ended: this fetch saw every id <= 500.
    cursor.fetched(99, 102, 530, [], full=False)
    assert cursor.value == 500 and not cursor.unconfirmed
    assert cursor.seen() == "{}"


def test_never_past_a_row_in_flight_or_undelivered() -> None:
    cursor = Cursor({3: 0})
    first = cursor.fetched(10, 12, 40, [5, 6, 7], full=False)
    cursor.fetched(12, 15, 40, [], full=False)
    second = cursor.fetched(15, 16, 40, [8], full=False)  # proves 40, but 5..8 are in flight
    assert first is not None and second is not None
    assert cursor.value == 4
    cursor.settled(first, [6, 7])  # 5 acked, 6 and 7 failed: fetched again
    assert cursor.value == 5
    assert cursor.seen() == "{5,8}"  # 6 and 7 are not excluded from the next fetch
    again = cursor.fetched(16, 17, 40, [6, 7], full=False)
    assert again is not None
    cursor.settled(second, [])
    cursor.settled(again, [])
    assert cursor.value == 40


def test_a_full_fetch_proves_only_up_to_its_last_row() -> None:
    cursor = Cursor({0: 0})
    cursor.fetched(1, 2, 1000, [], full=False)
    cursor.fetched(2, 3, 1000, [], full=False)
    batch = cursor.fetched(3, 4, 1000, [1, 2, 3], full=True)  # rows above 3 not looked at
    assert batch is not None
    cursor.settled(batch, [])
    assert cursor.value == 3


def test_slots_not_owned_are_out_of_reach_and_a_higher_stored_bound_is_kept() -> None:
    cursor = Cursor({2: 50, 7: 80})
    assert cursor.value == 50 and cursor.slots == [2, 7]
    bounds = _bounds(cursor)
    assert bounds[2] == 50 and bounds[7] == 80 and bounds[0] == NOT_OWNED and len(bounds) == 256
    for xmin, xmax in ((1, 2), (2, 3), (3, 4)):
        cursor.fetched(xmin, xmax, 60, [], full=False)
    assert cursor.value == 60 and _bounds(cursor)[7] == 80 and _bounds(cursor)[2] == 60


def test_the_bound_never_falls() -> None:
    cursor = Cursor({0: 10})
    for xmin, xmax, last in ((1, 2, 30), (2, 3, 30), (3, 4, 20), (4, 5, 20), (5, 6, 20)):
        cursor.fetched(xmin, xmax, last, [], full=False)
    assert cursor.value == 30


class FakeClock:
    """Stands in for time.monotonic: moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_long_transaction_does_not_hold_the_bound_once_the_emits_ended_with_fake_clock() -> None:
    clock = FakeClock()
    cursor = Cursor({0: 0}, clock=clock)
    batch = cursor.fetched(50, 60, 100, [90, 100], full=False)  # V = 100
    assert batch is not None
    cursor.fetched(50, 62, 110, [], full=False)  # X = 62; xid 50 (a report) runs on
    cursor.settled(batch, [])
    cursor.fetched(50, 63, 110, [], full=False)
    assert not cursor.wants_lockers and cursor.value == 0
    clock.now = 0.6  # waited past STALL_S: ask who holds the insert lock
    assert cursor.wants_lockers
    cursor.fetched(50, 64, 110, [], full=False, lockers=["4/17", "5/9"])
    cursor.fetched(50, 65, 110, [], full=False, lockers=["5/9", "6/2"])  # 5/9 still there
    assert cursor.value == 0
    cursor.fetched(50, 66, 110, [], full=False, lockers=["6/2"])  # both ended
    assert cursor.value == 0  # read during that fetch: the next one is the proof
    cursor.fetched(50, 67, 110, [], full=False)
    assert cursor.value == 100 and not cursor.unconfirmed


def test_an_emit_left_open_holds_the_bound_with_fake_clock() -> None:
    clock = FakeClock()
    cursor = Cursor({0: 0}, clock=clock)
    cursor.fetched(50, 60, 100, [], full=False)
    cursor.fetched(50, 62, 110, [], full=False)
    clock.now = 1.0
    for _ in range(5):
        cursor.fetched(50, 70, 120, [], full=False, lockers=["4/17"])  # it never ends
    assert cursor.value == 0
