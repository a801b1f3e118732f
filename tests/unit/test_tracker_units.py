"""Pure pieces of the tracker: cursors, waiting ages, the timeline's wording."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handoff.core.errors import InvalidRequest
from handoff.tracker import cursors, timeline
from handoff.tracker.ui import _local, age
from handoff.tracker.views import HistoryEntry, RejectionView

T0 = datetime(2026, 11, 29, 9, 20, tzinfo=UTC)


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(9000, 1, 1), timezones=st.just(UTC)
    ),
    # Cursors carry stored document ids: never a NUL (the naming rule's control characters).
    st.text(alphabet=st.characters(blacklist_characters="\x00"), min_size=0, max_size=200),
)
def test_time_cursor_round_trips(at: datetime, document_id: str) -> None:
    assert cursors.parse_time_key(cursors.time_key(at, document_id)) == (at, document_id)


@given(st.integers(min_value=0, max_value=2**62 - 1))
def test_number_cursor_round_trips(n: int) -> None:
    assert cursors.parse_number_key(cursors.number_key(n), 0) == n


@pytest.mark.parametrize("junk", ["", "!!!", "e30", "WzFd", "WyJhIiwiYiJd", "bnVsbA", "W1tdLDFd"])
def test_foreign_cursors_are_invalid_requests(junk: str) -> None:
    with pytest.raises(InvalidRequest):
        cursors.parse_time_key(junk)


def test_number_cursor_clamps_what_fits_its_format_and_rejects_what_does_not() -> None:
    # A position before or after every row is a valid position (cursors.py).
    assert cursors.parse_number_key(cursors.number_key(-1), 0) == 0
    assert cursors.parse_number_key(cursors.number_key(2**63), 0) == 2**62 - 1
    for junk in ("1" * 20, "1.5", "+1", "1 ", "1/\x00"):
        with pytest.raises(InvalidRequest):
            cursors.parse_number_key(junk, 0)


def test_no_cursor_starts_before_everything() -> None:
    at, doc = cursors.parse_time_key(None)
    assert at < datetime(1900, 1, 1, tzinfo=UTC) and doc == ""
    assert cursors.parse_number_key(None, 7) == 7


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (-5, "0 s"),
        (45, "45 s"),
        (60, "1 min"),
        (13 * 60 + 59, "13 min"),
        (2 * 3600 + 5 * 60, "2 h 05 min"),
        (3 * 86400 + 4 * 3600 + 59, "3 d 4 h"),
    ],
)
def test_age_reads_like_people_say_it(seconds: int, said: str) -> None:
    assert age(timedelta(seconds=seconds)) == said


@pytest.mark.parametrize(
    ("target", "safe"),
    [("/owners/a", "/owners/a"), ("//evil.example", "/"), ("https://evil", "/"), ("x", "/")],
)
def test_sign_in_redirects_only_to_local_paths(target: str, safe: str) -> None:
    assert _local(target) == safe


def _entry(version: int, before: str | None, after: str | None, minutes: int) -> HistoryEntry:
    return HistoryEntry(
        version=version,
        event_id=f"e{version}",
        event_type="step",
        sender=before or "routing",
        owner_before=before,
        owner_after=after,
        status="s",
        accepted_at=T0 + timedelta(minutes=minutes),
        assigned_at=None,
        due_at=None,
        data={},
        correlation_id=None,
        causation_id=None,
    )


def test_timeline_interleaves_versions_and_rejections_in_time_order() -> None:
    history = [
        _entry(1, None, "routing", 0),
        _entry(2, "routing", "review", 10),
        _entry(3, "review", "review", 20),
        _entry(4, "review", None, 30),
    ]
    rejection = RejectionView(
        id=1,
        document_id="invoice-42",
        run_id=None,
        event_id="late",
        event_type="routed",
        sender="routing",
        code="OwnershipMismatch",
        message="invoice-42 is owned by review, not by routing",
        expected_version=1,
        current_version=2,
        current_owner="review",
        requested_owner="review",
        status="s",
        rejected_at=T0 + timedelta(minutes=15),
    )
    entries = timeline.of(history, [rejection])
    assert [e.headline for e in entries] == [
        "routing created it",
        "routing handed it to review",
        "routing tried routed: OwnershipMismatch",
        "review made progress",
        "review finished it",
    ]
    assert [e.accepted for e in entries] == [True, True, False, True, True]


def test_time_in_stage_follows_the_owners_and_skips_progress() -> None:
    from datetime import UTC, datetime, timedelta

    from handoff.tracker.timeline import stages
    from handoff.tracker.views import HistoryEntry

    t0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

    def v(n: int, before: str | None, after: str | None, minutes: int) -> HistoryEntry:
        return HistoryEntry(
            version=n, event_id=f"e{n}", event_type="x", sender=before or "routing",
            owner_before=before, owner_after=after, status="s",
            accepted_at=t0 + timedelta(minutes=minutes), assigned_at=None, due_at=None,
            data={}, correlation_id=None, causation_id=None,
        )  # fmt: skip

    found = stages([v(1, None, "routing", 0), v(2, "routing", "review", 5),
                    v(3, "review", "review", 30), v(4, "review", "finalization", 65)])  # fmt: skip
    assert [(s.owner, s.took(t0 + timedelta(minutes=90))) for s in found] == [
        ("routing", timedelta(minutes=5)),
        ("review", timedelta(minutes=60)),
        ("finalization", timedelta(minutes=25)),
    ]
    assert found[-1].left is None
    finished = stages([v(1, None, "a", 0), v(2, "a", None, 10)])
    assert [(s.owner, s.left) for s in finished] == [("a", t0 + timedelta(minutes=10))]


def test_deadlines_are_said_as_people_say_them() -> None:
    from datetime import UTC, datetime, timedelta

    from handoff.tracker.ui import due

    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert due(now + timedelta(hours=1, minutes=14), now) == "due in 1 h 14 min"
    assert due(now - timedelta(hours=3, minutes=2), now) == "overdue by 3 h 02 min"
    assert due(None, now) == "no deadline"
