"""The stage order learned from edges, and the charts' scaling (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from handoff.tracker import charts
from handoff.tracker.flow import next_owners, stage_order


def test_a_line_with_a_loop_back_keeps_its_order() -> None:
    edges = [("", "routing", 10), ("routing", "review", 9), ("review", "routing", 3),
             ("review", "finalization", 6), ("finalization", "", 6)]  # fmt: skip
    assert stage_order(edges) == ["routing", "review", "finalization"]
    assert next_owners(edges, "review") == ["finalization", "routing"]


def test_a_stage_sits_at_its_longest_distance_from_creation() -> None:
    # A shortcut routing -> finalization must not pull finalization before review.
    edges = [("", "routing", 5), ("routing", "finalization", 4), ("routing", "review", 1),
             ("review", "finalization", 1)]  # fmt: skip
    assert stage_order(edges) == ["routing", "review", "finalization"]


def test_parallel_branches_order_by_traffic_then_name() -> None:
    edges = [("", "a", 1), ("a", "small", 1), ("a", "big", 9), ("a", "also", 1)]
    assert stage_order(edges) == ["a", "big", "also", "small"]


def test_owners_with_work_but_no_edges_come_last() -> None:
    assert stage_order([("", "a", 1)], also=["zed", "a", "b"]) == ["a", "b", "zed"]


@given(st.lists(st.tuples(st.sampled_from(["", "a", "b", "c", "d"]),
                          st.sampled_from(["", "a", "b", "c", "d"]),
                          st.integers(1, 100)), max_size=20))  # fmt: skip
def test_every_owner_appears_once_whatever_the_graph(
    edges: list[tuple[str, str, int]],
) -> None:
    order = stage_order(edges)
    owners = {o for s, t, _ in edges for o in (s, t)} - {""}
    assert sorted(order) == sorted(owners)


def test_a_chart_scales_points_into_its_box_with_a_round_top() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(hours=1)
    chart = charts.line_chart(
        "t", [charts.Series("a", [(start, 0), (end, 87)]), charts.Series("empty", [])], start, end
    )
    assert [line.name for line in chart.lines] == ["a"]  # a series without points is left out
    first, last = (tuple(map(float, p.split(","))) for p in chart.lines[0].path.split())
    assert first == (charts.LEFT, charts.HEIGHT - charts.BOTTOM)
    assert last[0] == charts.WIDTH - charts.RIGHT and last[1] > charts.TOP  # 87 of a top of 100
    assert chart.y_ticks[-1].label == "100" and chart.x_ticks[0].label == "00:00"
    assert charts.line_chart("t", [], start, end).empty
