"""Pure parts of the operate tools: the drain time, durations, replay manifests."""

from __future__ import annotations

from datetime import timedelta

import pytest

from handoff.core.errors import InvalidRequest, RetentionTooShort
from handoff.operate.backlog import Budget, drain_time
from handoff.operate.manifest import Manifest, Range, parse_range
from handoff.operate.retention import Retention, check, parse_duration, say


def test_the_playbooks_drain_time() -> None:
    # 7,200 waiting, 80/s arriving, 100/s completed: 20/s spare, 360 s.
    assert drain_time(7200, 80, 100) == 360
    assert drain_time(7200, 100, 100) is None  # no finite drain time
    assert drain_time(7200, 120, 100) is None
    assert drain_time(0, 120, 100) == 0
    assert Budget("c", 7200, 80.0, 100.0, 100.0, 12.0).drain_s == 360


def test_durations_read_and_say_as_written() -> None:
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("1d12h") == timedelta(hours=36)
    assert parse_duration("2w") == timedelta(days=14)
    assert say(timedelta(hours=36)) == "1d12h" and say(timedelta(minutes=90)) == "1h30m"
    for bad in ("", "thirty days", "10", "1d 2x", "0h"):
        with pytest.raises(InvalidRequest):
            parse_duration(bad)


def test_a_retention_below_the_replay_window_is_refused_with_why() -> None:
    day = timedelta(days=1)
    ok = Retention(day, 30 * day, 30 * day, day, 30 * day, 90 * day)
    check(ok)
    short = Retention(2 * day, 30 * day, day, day, 30 * day, 90 * day)
    with pytest.raises(RetentionTooShort, match="guards 1d is shorter") as caught:
        check(short)
    assert "outbox 1d is shorter" in str(caught.value)


def _manifest(**change: object) -> Manifest:
    base: dict[str, object] = {
        "tenant": "t", "consumer": "review", "topic": "handoff.events",
        "ranges": [Range(partition=0, start=10, end=19)], "failure_class": "handler_error",
        "handler_revision": {"routed": "2"}, "expected_effect": "one row each",
        "reconciliation_owner": "ops",
    }  # fmt: skip
    return Manifest.model_validate({**base, **change})


def test_a_manifest_revision_names_exactly_its_content() -> None:
    first = _manifest()
    assert first.revision == _manifest().revision and len(first.revision) == 16
    assert first.records == 10
    for change in ({"rate": 5.0}, {"excluded": ["e-1"]}, {"allowed_capabilities": ["pay"]},
                   {"handler_revision": {"routed": "3"}}):  # fmt: skip
        assert _manifest(**change).revision != first.revision
    with pytest.raises(ValueError, match="end"):
        Range(partition=0, start=10, end=5)
    with pytest.raises(ValueError):
        _manifest(duplicate_guard="bypass")  # the guard always decides


def test_ranges_are_read_as_written() -> None:
    assert parse_range("2:100-250") == (2, 100, 250)
    assert parse_range("0:5-") == (0, 5, None)
    with pytest.raises(InvalidRequest, match="PARTITION:START-END"):
        parse_range("two")
