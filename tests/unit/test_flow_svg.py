"""The pipeline drawn as a flow: nodes, weighted edges, return arcs, red stages."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from handoff.tracker.flow_svg import draw, layout
from handoff.tracker.views import PipelineEdge, PipelineStage, PipelineView

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def _stage(owner: str, column: int, **kw: object) -> PipelineStage:
    base: dict[str, object] = {
        "owner": owner, "waiting": 2, "overdue": 0,
        "oldest_assigned_at": NOW - timedelta(minutes=3),
        "arrived_per_minute": 1.0, "departed_per_minute": 1.0, "quarantined": 0, "next": [],
        "column": column,
    }  # fmt: skip
    base.update(kw)
    return PipelineStage.model_validate(base)


def _view() -> PipelineView:
    edges = [("", "routing", 40, 100), ("routing", "review", 30, 80), ("review", "routing", 3, 9),
             ("review", "finalization", 25, 70), ("routing", "finalization", 0, 5),
             ("finalization", "", 20, 60)]  # fmt: skip
    return PipelineView(
        as_of=NOW, window_minutes=15, created_per_minute=2.67, completed_per_minute=1.33,
        stages=[_stage("routing", 1), _stage("review", 2, overdue=4),
                _stage("finalization", 3, arrived_per_minute=3.0, departed_per_minute=1.0),
                _stage("orphan", 1, waiting=0)],
        edges=[PipelineEdge(from_owner=a, to_owner=b, moved=m, total=t) for a, b, m, t in edges],
    )  # fmt: skip


def _age(delta: timedelta) -> str:
    return f"{int(delta.total_seconds() // 60)}m"


def _parse() -> ET.Element:
    return ET.fromstring(str(draw(_view(), _age)))  # well-formed XML, or this raises


def test_stages_sit_in_their_columns_between_creation_and_completion() -> None:
    boxes, width, _ = layout(_view())
    xs = {key: round(box.cx) for key, box in boxes.items()}
    assert xs["\x00created"] < xs["routing"] < xs["review"] < xs["finalization"] < xs["\x00done"]
    assert xs["orphan"] == xs["routing"]  # same column, stacked
    assert boxes["orphan"].y != boxes["routing"].y
    assert width >= boxes["\x00done"].x + boxes["\x00done"].w


def test_nodes_link_to_their_owner_and_carry_the_figures() -> None:
    svg = _parse()
    nodes = {g.get("data-flow-stage"): g for g in svg.iter(f"{SVG}g") if g.get("data-flow-stage")}
    assert list(nodes) == ["routing", "review", "finalization", "orphan"]
    review = nodes["review"]
    links = [a.get("href") for a in review.iter(f"{SVG}a")]
    assert links == ["/owners/review", "/owners/review?view=overdue"]
    waiting = next(t for t in review.iter(f"{SVG}tspan") if t.get("data-flow-waiting") == "")
    assert waiting.text == "2"
    assert "oldest 3m" in "".join(review.itertext())
    assert svg.find(f".//{SVG}g[@data-flow-start]") is not None
    assert svg.find(f".//{SVG}g[@data-flow-end]") is not None


def test_late_stages_are_marked_with_why() -> None:
    svg = _parse()
    classes = {g.get("data-flow-stage"): g.get("class") for g in svg.iter(f"{SVG}g")
               if g.get("data-flow-stage")}  # fmt: skip
    assert classes == {"routing": "flow-node", "review": "flow-node late",
                       "finalization": "flow-node late", "orphan": "flow-node"}  # fmt: skip
    titles = "".join(svg.itertext())
    assert "4 past the deadline" in titles and "backlog growing" in titles


def test_edges_are_weighted_and_a_send_back_is_a_return_arc() -> None:
    svg = _parse()
    edges = {p.get("data-flow-edge"): p for p in svg.iter(f"{SVG}path") if p.get("data-flow-edge")}
    assert set(edges) == {"created → routing", "routing → review", "review → routing",
                          "review → finalization", "routing → finalization",
                          "finalization → done"}  # fmt: skip
    width = {k: float(p.get("stroke-width", "0")) for k, p in edges.items()}
    assert width["created → routing"] > width["review → finalization"] > width["review → routing"]
    assert "back" in (edges["review → routing"].get("class") or "")
    assert "quiet" in (edges["routing → finalization"].get("class") or "")
    assert "forward" in (edges["routing → review"].get("class") or "")
    # The return arc's bend runs over every node: under them it would cross the orphan
    # stacked below routing.
    boxes, _, _ = layout(_view())
    ys = _ys(edges["review → routing"])
    assert ys[1] == ys[2] < min(box.y for box in boxes.values())
    counts = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "flow-count"]
    assert sorted(counts, key=int) == ["3", "20", "25", "30", "40"]


def _ys(path: ET.Element) -> list[float]:
    numbers = [float(n) for n in re.findall(r"-?\d+\.?\d*", path.get("d", ""))]
    return numbers[1::2]


def test_a_return_arc_runs_under_the_nodes_when_nothing_is_below_its_ends() -> None:
    view = _view()
    view = view.model_copy(update={"stages": view.stages[:3]})  # no orphan
    svg = ET.fromstring(str(draw(view, _age)))
    [back] = [p for p in svg.iter(f"{SVG}path") if "back" in (p.get("class") or "")]
    boxes, _, _ = layout(view)
    ys = _ys(back)
    assert ys[1] == ys[2] > max(box.y + box.h for box in boxes.values())
    _, _, _, height = (float(n) for n in (svg.get("viewBox") or "").split())
    assert height > ys[1]  # the arc is inside the drawing


def test_nothing_moved_draws_nothing() -> None:
    empty = PipelineView(as_of=NOW, window_minutes=15, created_per_minute=0,
                         completed_per_minute=0, stages=[], edges=[])  # fmt: skip
    assert str(draw(empty, _age)) == ""
