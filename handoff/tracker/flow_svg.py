"""The pipeline drawn as a flow: server-side SVG, no script, no CDN.

Stages are nodes in columns by their place in the flow (flow.stage_columns:
the longest way from creation), creation and completion are end nodes on
either side, and every way work has gone is an edge whose width is the
documents that took it in the chosen window. An edge that goes back (a
send-back: review returns an invoice to routing) is drawn as a return arc
round the nodes. A stage is red when its oldest work is past its deadline,
an event of it waits in quarantine, or its backlog grows (more arrived than
left in the window). Each node links to its owner's page, its overdue count
to the overdue view, as the stage cards do.

Why SVG from the server: the page stays one request with no script to run
or vendor (the CSP allows none from elsewhere), and the drawing is testable
as text.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote

from markupsafe import Markup, escape

from handoff.tracker.flow import CREATED
from handoff.tracker.views import PipelineEdge, PipelineStage, PipelineView

NODE_W, NODE_H = 164, 92
END_W, END_H = 104, 48
COL_GAP, ROW_GAP, PAD = 72, 30, 16
NAME_CHARS = 18
MIN_WIDTH, MAX_EXTRA_WIDTH = 1.5, 10.0
START, END = "\x00created", "\x00done"  # never an owner's name


@dataclass
class Box:
    key: str
    x: float
    y: float
    w: float
    h: float
    column: int

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


def layout(view: PipelineView) -> tuple[dict[str, Box], float, float]:
    """Node boxes by key (owner, START, END), and the drawing's width and height
    before the return arcs."""
    last = max((s.column for s in view.stages), default=0) + 1
    by_column: dict[int, list[str]] = defaultdict(list)
    by_column[0].append(START)
    for stage in view.stages:
        by_column[stage.column].append(stage.owner)
    by_column[last].append(END)

    def height(keys: list[str]) -> float:
        return sum(END_H if k in (START, END) else NODE_H for k in keys) + ROW_GAP * (len(keys) - 1)

    tallest = max(height(keys) for keys in by_column.values())
    boxes: dict[str, Box] = {}
    for column, keys in by_column.items():
        left = PAD + column * (NODE_W + COL_GAP)
        y = PAD + (tallest - height(keys)) / 2
        for key in keys:
            end = key in (START, END)
            w, h = (END_W, END_H) if end else (NODE_W, NODE_H)
            boxes[key] = Box(key, left + (NODE_W - w) / 2, y, w, h, column)
            y += h + ROW_GAP
    width = PAD * 2 + (last + 1) * NODE_W + last * COL_GAP
    return boxes, width, PAD * 2 + tallest


def draw(view: PipelineView, age: Callable[[timedelta], str]) -> Markup:
    """The flow as an inline ``<svg>``, or nothing when no work has moved yet."""
    if not view.stages:
        return Markup("")
    boxes, width, height = layout(view)
    heaviest = max((e.moved for e in view.edges), default=0)
    paths: list[str] = []
    labels: list[str] = []
    deepest, highest = height, 0.0
    returns = {"above": 0, "below": 0}
    ports = _ports(view.edges, boxes)
    tops, bottoms = _column_ends(boxes)
    for edge in view.edges:
        source, target = boxes[_key(edge.from_owner, START)], boxes[_key(edge.to_owner, END)]
        stroke = _width(edge.moved, heaviest)
        if target.column > source.column:
            (sx, sy), (tx, ty) = ports[("out", edge)], ports[("in", edge)]
            bend = (tx - sx) / 2
            c1, c2 = (sx + bend, sy), (tx - bend, ty)
            kind = "forward"
        else:  # back to an earlier stage (or beside it): an arc round the nodes
            # Over them when both ends head their columns and one has a node below it
            # (an arc under would cross that node), else under them. Each arc gets its
            # own depth, so none runs along another.
            over = (tops[source.column] is source and tops[target.column] is target) and not (
                bottoms[source.column] is source and bottoms[target.column] is target
            )
            side = "above" if over else "below"
            returns[side] += 1
            if over:
                sx, sy, tx, ty = source.cx + 12, source.y, target.cx - 12, target.y
                bend = min(b.y for b in boxes.values()) - 18 * returns[side]
                highest = min(highest, bend - PAD)
            else:
                sx, sy = source.cx + 12, source.y + source.h
                tx, ty = target.cx - 12, target.y + target.h
                bend = height + 18 * returns[side]
                deepest = max(deepest, bend + PAD)
            c1, c2 = (sx, bend), (tx, bend)
            kind = "back"
        mid_x = (sx + 3 * c1[0] + 3 * c2[0] + tx) / 8
        mid_y = (sy + 3 * c1[1] + 3 * c2[1] + ty) / 8
        what = f"{_name(edge.from_owner, 'created')} → {_name(edge.to_owner, 'done')}"
        quiet = " quiet" if edge.moved == 0 else ""
        paths.append(
            f'<path class="flow-edge {kind}{quiet}" data-flow-edge="{escape(what)}" '
            f'd="M{sx:.1f},{sy:.1f} C{c1[0]:.1f},{c1[1]:.1f} {c2[0]:.1f},{c2[1]:.1f} '
            f'{tx:.1f},{ty:.1f}" stroke-width="{stroke:.1f}" marker-end="url(#flow-arrow)">'
            f"<title>{escape(what)}: {edge.moved} in the last {view.window_minutes} min, "
            f"{edge.total} in all</title></path>"
        )
        if edge.moved:
            labels.append(
                f'<text class="flow-count" x="{mid_x:.1f}" y="{mid_y - 4:.1f}">{edge.moved}</text>'
            )
    nodes = [_end(boxes[START], "created", view.created_per_minute, "data-flow-start")]
    nodes += [_stage(boxes[s.owner], s, view, age) for s in view.stages]
    nodes.append(_end(boxes[END], "done", view.completed_per_minute, "data-flow-end"))
    return Markup(
        f'<svg class="flow" role="img" viewBox="0 {highest:.0f} {width:.0f} '
        f'{deepest - highest:.0f}" style="max-width: {width:.0f}px" '
        'xmlns="http://www.w3.org/2000/svg">'
        f"<title>The pipeline as a flow over the last {view.window_minutes} minutes</title>"
        '<defs><marker id="flow-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="9" markerHeight="9" markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" class="flow-arrowhead"/></marker></defs>'
        + "".join(paths)
        + "".join(nodes)
        + "".join(labels)
        + "</svg>"
    )


def _column_ends(boxes: dict[str, Box]) -> tuple[dict[int, Box], dict[int, Box]]:
    """The top and the bottom node of each column."""
    tops: dict[int, Box] = {}
    bottoms: dict[int, Box] = {}
    for box in boxes.values():
        if box.column not in tops or box.y < tops[box.column].y:
            tops[box.column] = box
        if box.column not in bottoms or box.y > bottoms[box.column].y:
            bottoms[box.column] = box
    return tops, bottoms


def _ports(
    edges: list[PipelineEdge], boxes: dict[str, Box]
) -> dict[tuple[str, PipelineEdge], tuple[float, float]]:
    """Where each forward edge leaves its source and enters its target: spread along
    the node's side in the order of the other ends, so that edges do not cross there."""
    leaving: dict[str, list[PipelineEdge]] = defaultdict(list)
    entering: dict[str, list[PipelineEdge]] = defaultdict(list)
    for edge in edges:
        source, target = _key(edge.from_owner, START), _key(edge.to_owner, END)
        if boxes[target].column > boxes[source].column:
            leaving[source].append(edge)
            entering[target].append(edge)
    found: dict[tuple[str, PipelineEdge], tuple[float, float]] = {}
    for key, out in leaving.items():
        box = boxes[key]
        out.sort(key=lambda e: boxes[_key(e.to_owner, END)].y)
        for i, edge in enumerate(out):
            found[("out", edge)] = (box.x + box.w, box.y + box.h * (i + 1) / (len(out) + 1))
    for key, into in entering.items():
        box = boxes[key]
        into.sort(key=lambda e: boxes[_key(e.from_owner, START)].y)
        for i, edge in enumerate(into):
            found[("in", edge)] = (box.x, box.y + box.h * (i + 1) / (len(into) + 1))
    return found


def _key(owner: str, end: str) -> str:
    return end if owner == CREATED else owner


def _name(owner: str, end: str) -> str:
    return end if owner == CREATED else owner


def _width(moved: int, heaviest: int) -> float:
    if moved <= 0 or heaviest <= 0:
        return MIN_WIDTH
    return MIN_WIDTH + 0.5 + MAX_EXTRA_WIDTH * math.sqrt(moved / heaviest)


def _why_late(stage: PipelineStage) -> list[str]:
    why = []
    if stage.overdue:
        why.append(f"{stage.overdue} past the deadline")
    if stage.growing:
        why.append("backlog growing")
    if stage.quarantined:
        why.append(f"{stage.quarantined} quarantined")
    return why


def _stage(
    box: Box, stage: PipelineStage, view: PipelineView, age: Callable[[timedelta], str]
) -> str:
    owner = stage.owner
    href = f"/owners/{quote(owner, safe='')}"
    name = owner if len(owner) <= NAME_CHARS else owner[: NAME_CHARS - 1] + "…"
    late = _why_late(stage)
    oldest = (
        f"oldest {age(view.as_of - stage.oldest_assigned_at)}"
        if stage.oldest_assigned_at
        else "nothing waiting"
    )
    figure = f'overdue <tspan data-flow-overdue="">{stage.overdue}</tspan>'
    if stage.overdue:
        overdue = (
            f'<a href="{href}?view=overdue">'
            f'<text x="12" y="62" class="flow-figure red">{figure}</text></a>'
        )
    else:
        overdue = f'<text x="12" y="62" class="flow-figure">{figure}</text>'
    pace = f"{stage.arrived_per_minute} in / {stage.departed_per_minute} out per minute" + (
        f"; {'; '.join(late)}" if late else ""
    )
    return (
        f'<g class="flow-node{" late" if late else ""}" data-flow-stage="{escape(owner)}" '
        f'transform="translate({box.x:.1f},{box.y:.1f})">'
        f"<title>{escape(owner)}: {escape(pace)}</title>"
        f'<a href="{href}"><rect class="flow-box" width="{box.w}" height="{box.h}" rx="10"/>'
        f'<text x="12" y="24" class="flow-name">{escape(name)}</text></a>'
        f'<text x="12" y="44" class="flow-figure">waiting '
        f'<tspan data-flow-waiting="">{stage.waiting}</tspan></text>'
        f"{overdue}"
        f'<text x="12" y="80" class="flow-figure">{escape(oldest)}</text>'
        "</g>"
    )


def _end(box: Box, label: str, per_minute: float, mark: str) -> str:
    return (
        f'<g class="flow-end" {mark}="" transform="translate({box.x:.1f},{box.y:.1f})">'
        f'<rect class="flow-end-box" width="{box.w}" height="{box.h}" rx="{box.h / 2}"/>'
        f'<text x="{box.w / 2}" y="20" class="flow-end-name">{label}</text>'
        f'<text x="{box.w / 2}" y="37" class="flow-end-pace">{per_minute}/min</text>'
        "</g>"
    )
