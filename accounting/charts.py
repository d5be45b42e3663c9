"""A unit's usage over time as server-side SVG geometry (the templates draw it; no JavaScript).

One column per day, week or month: devices held inside the guarantee (solid), the idle guarantee
others used — lent — (green), what was borrowed above the guarantee, queued demand above that
(light), the guarantee and the ceiling as lines, and a dark tick at the measured activity (DCGM)
where it was measured; a period without telemetry is marked as a gap, not drawn as zero. Values are
average devices over the hours that had telemetry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

WITHIN, BORROWED, PENDING, GUARANTEE, CEILING, GAP = "#3b6fd8", "#e3a21a", "#c9d8f5", "#1d2430", "#b3261e", "#e8ecf1"
LENT, ACTIVE = "#2e9e6a", "#111111"
LABELS = {"day": "%d %b", "week": "%d %b", "month": "%b %Y"}


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
    active: float | None = None
    """Measured activity (device-hours); None where nothing measured it."""
    full_minutes: int = 0
    """Unit-minutes held at ≥ 90 % of the guarantee (units with a guarantee only)."""
    minutes: int = 0
    """Unit-minutes with telemetry."""


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
    active: list[tuple[float, float, float, str]] = field(default_factory=list)
    """Ticks at the measured activity: x1, x2, y, title."""
    measured: bool = False
    full_share: float | None = None
    """Share of the charted minutes with telemetry held at ≥ 90 % of the guarantee (SC '21's measure)."""


def usage_chart(
    days: Sequence[Day], ceiling: float, *, period: str = "day", width: int = 720, height: int = 220
) -> UsageChart | None:
    if not days:
        return None
    left, bottom, top_pad = 44, 24, 8
    plot_h = height - bottom - top_pad
    top = max(
        [ceiling, *((d.within + d.lent + d.borrowed + d.pending) / d.hours for d in days if d.hours)],
        default=1,
    )
    top = max(top, 1.0)
    step = (width - left - 4) / len(days)

    def y(value: float) -> float:
        return top_pad + plot_h * (1 - value / top)

    rects: list[Rect] = []
    guarantee_points, active = [], []
    for i, d in enumerate(days):
        x = left + i * step
        name = f"{period} of {d.day}" if period != "day" else str(d.day)
        if not d.hours:
            rects.append(Rect(x, top_pad, step - 1, plot_h, GAP, f"{name}: no telemetry (a gap, not idle)"))
            continue
        within, borrowed, pending = d.within / d.hours, d.borrowed / d.hours, d.pending / d.hours
        guarantee, lent = d.guarantee / d.hours, d.lent / d.hours
        measured = (
            f", active {d.active / d.hours:.1f} (measured)" if d.active is not None else ", activity not measured"
        )
        title = (
            f"{name}: held {within + borrowed:.1f} (within {within:.1f}, borrowed {borrowed:.1f}), "
            f"lent {lent:.1f}, queued {pending:.1f}, guarantee {guarantee:.1f}{measured}; "
            f"{d.hours:.0f} h of telemetry"
        )
        level = 0.0
        for amount, colour in ((within, WITHIN), (lent, LENT), (borrowed, BORROWED), (pending, PENDING)):
            if amount > 0:
                rects.append(Rect(x, y(level + amount), step - 1, y(level) - y(level + amount), colour, title))
            level += amount
        guarantee_points.append(f"{x:.1f},{y(guarantee):.1f} {x + step - 1:.1f},{y(guarantee):.1f}")
        if d.active is not None:
            active.append((x + 1, x + step - 2, y(d.active / d.hours), title))
    ticks = [(y(top * f), f"{top * f:.0f}") for f in (0, 0.25, 0.5, 0.75, 1)]
    every = max(1, len(days) // 8)
    labels = [
        (left + i * step, f"{d.day:{LABELS[period]}}")
        for i, d in enumerate(days)
        if i % every == 0 and (i < len(days) - 2 or len(days) < 4)
    ]
    ceiling_line = f"{left},{y(ceiling):.1f} {width - 4},{y(ceiling):.1f}"
    minutes = sum(d.minutes for d in days)
    full = sum(d.full_minutes for d in days) / minutes if minutes else None
    return UsageChart(
        rects, " ".join(guarantee_points), ceiling_line, ticks, labels, width, height, top, active, bool(active), full
    )


@dataclass(frozen=True)
class Spark:
    rects: list[Rect]
    guarantee_y: float | None
    width: int
    height: int


def evidence_chart(daily: Sequence[Sequence[object]], guarantee: float | None, *, height: int = 48) -> Spark | None:
    """A finding's small chart: per day, devices held (solid) and queued (light) on one scale, and
    the guarantee as a line. ``daily`` rows are (day, held, queued)."""
    if not daily:
        return None
    rows = [(str(d[0]), float(str(d[1])), float(str(d[2]))) for d in daily]
    top = max([guarantee or 0.0, *(held + queued for _, held, queued in rows), 1.0])
    step, rects = 18, []

    def y(value: float) -> float:
        return height * (1 - value / top)

    for i, (day, held, queued) in enumerate(rows):
        title = f"{day}: held {held:.1f}, queued {queued:.1f}"
        rects.append(Rect(i * step, y(held), step - 2, height - y(held), WITHIN, title))
        rects.append(Rect(i * step, y(held + queued), step - 2, y(held) - y(held + queued), PENDING, title))
    return Spark(rects, y(guarantee) if guarantee else None, len(rows) * step, height)


BAR_ROOM = 34.0
"""The largest before/after bar's width in % of its row: two bars, their numbers and the label fit."""


def comparison_rows(units: Sequence[Mapping[str, Any]], *, after: str = "proposed") -> list[dict[str, Any]]:
    """Before/after bars for a what-if or a plan: per unit, queued and idle guarantee device-hours
    this month and with the change, as widths in % of the row: the largest value shown takes
    :data:`BAR_ROOM` of it, every other in proportion (before and after sit side by side with their
    numbers; a cap on each bar made 10,076 h → 22,969 h two bars of one length)."""
    largest = max(
        [1.0]
        + [float(u[side][m]) for u in units for side in ("today", after) for m in ("queued_h", "idle_guarantee_h")]
    )
    rows = []
    for u in units:
        before, then = u["today"], u[after]
        rows.append(
            {
                "unit_path": u["unit_path"],
                "name": u["unit_path"].rsplit("/", 1)[-1],
                "flavor": u["flavor"],
                "changed": u.get("changed", False),
                "guarantee": (before["guarantee"], then["guarantee"]),
                "queued": (before["queued_h"], then["queued_h"]),
                "queued_pct": (BAR_ROOM * before["queued_h"] / largest, BAR_ROOM * then["queued_h"] / largest),
                "idle": (before["idle_guarantee_h"], then["idle_guarantee_h"]),
                "idle_pct": (
                    BAR_ROOM * before["idle_guarantee_h"] / largest,
                    BAR_ROOM * then["idle_guarantee_h"] / largest,
                ),
                "full": (before["full_share"], then["full_share"]),
            }
        )
    return rows


@dataclass(frozen=True)
class BurnDown:
    """A budget's burn-down as SVG geometry: three lines labelled where they end, no legend."""

    budget: str
    actual: str
    forecast: str
    today_x: float | None
    labels: list[tuple[float, float, str, str, str]]
    """x, y, text, colour, text-anchor: each line's name and figure beside its end."""
    ticks: list[tuple[float, str]]
    days: list[tuple[float, str]]
    width: int
    height: int
    left: int


def burn_down_chart(
    lines: Mapping[str, Sequence[tuple[datetime, float]]], *, now: datetime, width: int = 720, height: int = 200
) -> BurnDown | None:
    """Device-hours left over the period (quotas.policy.budgets.burn_down's lines): the plan as a
    straight line, what is left (solid), the trailing rate's forecast (dotted); each line carries its
    name at its end and now is marked."""
    plan = list(lines.get("budget", ()))
    if len(plan) < 2:
        return None
    left, right, bottom, top_pad = 44, 150, 22, 12
    first, last = plan[0][0], plan[-1][0]
    span = max(1.0, (last - first).total_seconds())
    top = max(1.0, *(v for name in ("budget", "actual", "forecast") for _, v in lines.get(name, ())))
    plot_w, plot_h = width - left - right, height - bottom - top_pad

    def x(at: datetime) -> float:
        return left + plot_w * (at - first).total_seconds() / span

    def y(value: float) -> float:
        return top_pad + plot_h * (1 - max(0.0, value) / top)

    def points(name: str) -> str:
        return " ".join(f"{x(at):.1f},{y(v):.1f}" for at, v in lines.get(name, ()))

    labels: list[tuple[float, float, str, str, str]] = []
    actual, forecast = list(lines.get("actual", ())), list(lines.get("forecast", ()))
    if actual:
        at, v = actual[-1]
        labels.append((x(at) + 6, y(v) - 6, f"left: {v:,.0f} h", WITHIN, "start"))
    if len(forecast) > 1:  # below the dotted line, ending where it does: clear of the plan and the axis
        at, v = forecast[-1]
        text = f"forecast: out {at:%d %b}" if v <= 0 else f"forecast: {v:,.0f} h at end"
        labels.append((x(at) - 48, y(v) - 6, text, BORROWED, "end"))
    labels.append((x(last) + 6, y(0) - 4, "plan: 0 at period end", GUARANTEE, "start"))
    ticks = [(y(top * f), f"{top * f:,.0f}") for f in (0, 0.5, 1)]
    days = (last - first).days
    every = max(1, days // 6)
    marks = [first + timedelta(days=n) for n in range(0, days, every)]
    return BurnDown(
        points("budget"), points("actual"), points("forecast"), x(now) if first <= now <= last else None, labels,
        ticks, [(x(m), f"{m:%d %b}") for m in marks], width, height, left,
    )  # fmt: skip
