"""The relay's fetch floor, with a fake connection that answers the horizon query."""

from __future__ import annotations

from typing import Any

from handoff.relay.floor import Floor


class FakeHorizon:
    """Stands in for a psycopg connection: each execute answers the next (xmin, xmax, last id)."""

    def __init__(self, *answers: tuple[int, int, int]) -> None:
        self.answers = list(answers)

    def execute(self, _query: str) -> Any:
        answer = self.answers.pop(0)
        return type("Cursor", (), {"fetchone": lambda self: answer})()


def test_floor_rises_only_after_older_transactions_end_with_fake_connection() -> None:
    floor = Floor()
    conn: Any = FakeHorizon((100, 105, 500), (103, 108, 520), (105, 110, 540))
    floor.tick(conn, 0.0)  # probe: ids up to 500 handed out before xid 105
    floor.after_fetch(first_id=450, in_flight=[])
    assert floor.value == 0  # transactions older than 105 may still insert ids <= 500
    floor.tick(conn, 1.0)  # xmin 103 < 105: not yet
    floor.after_fetch(first_id=450, in_flight=[])
    assert floor.value == 0
    floor.tick(conn, 2.0)  # xmin 105: every id <= 500 is visible now
    floor.after_fetch(first_id=480, in_flight=[470, 490])
    assert floor.value == 470  # never above a row still in flight
    floor.tick(conn, 2.05)  # within TICK_S: no query, nothing changes
    assert conn.answers == []


def test_floor_with_nothing_pending_moves_past_the_last_id_with_fake_connection() -> None:
    floor = Floor()
    conn: Any = FakeHorizon((10, 12, 40), (12, 15, 40))
    floor.tick(conn, 0.0)
    floor.tick(conn, 1.0)
    floor.after_fetch(first_id=None, in_flight=[])
    assert floor.value == 41


def test_floor_never_falls_except_on_reset_with_fake_connection() -> None:
    floor = Floor()
    conn: Any = FakeHorizon((10, 12, 40), (12, 15, 60), (15, 20, 80))
    floor.tick(conn, 0.0)
    floor.tick(conn, 1.0)
    floor.after_fetch(first_id=30, in_flight=[])
    floor.tick(conn, 2.0)
    floor.after_fetch(first_id=25, in_flight=[])  # a lower first id cannot lower it
    assert floor.value == 30
    floor.reset(3.0)
    assert floor.value == 0
