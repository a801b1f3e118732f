"""Line charts as SVG, drawn on the server: no script library, works offline.

A chart is a few polylines over a time axis; the tracker draws backlog and
oldest age per owner and arrivals against completions. Points are scaled
here, the template only places them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 76, 24, 10, 24  # room for the axis labels
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[datetime, float]]


@dataclass(frozen=True)
class Line:
    name: str
    colour: str
    path: str  # SVG polyline points "x,y x,y …"
    last: str  # the last value, formatted
    end_x: float  # where the last point is drawn (a dot: one point makes no line)
    end_y: float


@dataclass(frozen=True)
class Tick:
    at: float  # pixel position along its axis
    label: str


@dataclass(frozen=True)
class Chart:
    title: str
    lines: list[Line]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def empty(self) -> bool:
        return not self.lines


def line_chart(
    title: str,
    series: Sequence[Series],
    start: datetime,
    end: datetime,
    fmt: Callable[[float], str] = lambda v: f"{v:,.0f}",
) -> Chart:
    """Scale the series onto one chart from ``start`` to ``end``; y from 0 to the peak."""
    span = max((end - start).total_seconds(), 1.0)
    peak = max((v for s in series for _, v in s.points), default=0.0)
    top = _nice(peak)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(at: datetime) -> float:
        return LEFT + plot_w * min(max((at - start).total_seconds() / span, 0.0), 1.0)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    lines = [
        Line(
            name=s.name,
            colour=PALETTE[i % len(PALETTE)],
            path=" ".join(f"{x(at):.1f},{y(v):.1f}" for at, v in s.points),
            last=fmt(s.points[-1][1]),
            end_x=round(x(s.points[-1][0]), 1),
            end_y=round(y(s.points[-1][1]), 1),
        )
        for i, s in enumerate(series)
        if s.points
    ]
    y_ticks = [Tick(y(top * k / 4), fmt(top * k / 4)) for k in range(5)]
    x_ticks = [
        Tick(x(at), at.strftime("%H:%M"))
        for at in (start + (end - start) * k / 6 for k in range(7))
    ]
    return Chart(title, lines, x_ticks, y_ticks)


def _nice(peak: float) -> float:
    """A round top for the y axis at or above the peak (1, 2, 2.5 or 5 times a power of ten)."""
    if peak <= 0:
        return 1.0
    scale = 10 ** (len(str(int(peak))) - 1) if peak >= 1 else 1.0
    for step in (1, 2, 2.5, 5, 10):
        if step * scale >= peak:
            return step * scale
    return 10 * scale
