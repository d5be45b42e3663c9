"""A unit's usage over time as server-side SVG geometry (the templates draw it; no JavaScript).

One column per day: devices held inside the guarantee (solid) with what was borrowed on top, queued
demand above that (light), the guarantee and the ceiling as lines; a day without telemetry is
marked as a gap, not drawn as zero. Values are average devices over the hours that had telemetry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

WITHIN, BORROWED, PENDING, GUARANTEE, CEILING, GAP = "#3b6fd8", "#e3a21a", "#c9d8f5", "#1d2430", "#b3261e", "#e8ecf1"


@dataclass(frozen=True)
class Day:
    day: date
    hours: float
    """Hours of the day with telemetry (0: a gap)."""
    guarantee: float
    within: float
    borrowed: float
    lent: float
    pending: float


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass(frozen=True)
class UsageChart:
    rects: list[Rect]
    guarantee_line: str
    ceiling_line: str
    ticks: list[tuple[float, str]]
    labels: list[tuple[float, str]]
    width: int
    height: int
    top: float


def usage_chart(days: Sequence[Day], ceiling: float, *, width: int = 720, height: int = 220) -> UsageChart | None:
    if not days:
        return None
    left, bottom, top_pad = 44, 24, 8
    plot_h = height - bottom - top_pad
    top = max(
        [ceiling, *(d.within / d.hours + d.borrowed / d.hours + d.pending / d.hours for d in days if d.hours)],
        default=1,
    )
    top = max(top, 1.0)
    step = (width - left - 4) / len(days)

    def y(value: float) -> float:
        return top_pad + plot_h * (1 - value / top)

    rects, guarantee_points = [], []
    for i, d in enumerate(days):
        x = left + i * step
        if not d.hours:
            rects.append(Rect(x, top_pad, step - 1, plot_h, GAP, f"{d.day}: no telemetry (a gap, not idle)"))
            continue
        within, borrowed, pending = d.within / d.hours, d.borrowed / d.hours, d.pending / d.hours
        guarantee, lent = d.guarantee / d.hours, d.lent / d.hours
        title = (
            f"{d.day}: held {within + borrowed:.1f} (within {within:.1f}, borrowed {borrowed:.1f}), "
            f"queued {pending:.1f}, guarantee {guarantee:.1f}, lent {lent:.1f}; {d.hours:.0f} h of telemetry"
        )
        rects.append(Rect(x, y(within), step - 1, y(0) - y(within), WITHIN, title))
        rects.append(Rect(x, y(within + borrowed), step - 1, y(within) - y(within + borrowed), BORROWED, title))
        rects.append(
            Rect(
                x,
                y(within + borrowed + pending),
                step - 1,
                y(within + borrowed) - y(within + borrowed + pending),
                PENDING,
                title,
            )
        )
        guarantee_points.append(f"{x:.1f},{y(guarantee):.1f} {x + step - 1:.1f},{y(guarantee):.1f}")
    ticks = [(y(top * f), f"{top * f:.0f}") for f in (0, 0.25, 0.5, 0.75, 1)]
    every = max(1, len(days) // 8)
    labels = [(left + i * step, f"{d.day:%d %b}") for i, d in enumerate(days) if i % every == 0 and i < len(days) - 2]
    ceiling_line = f"{left},{y(ceiling):.1f} {width - 4},{y(ceiling):.1f}"
    return UsageChart(rects, " ".join(guarantee_points), ceiling_line, ticks, labels, width, height, top)
