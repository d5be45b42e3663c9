"""Server-side SVG charts: plain geometry, drawn by the templates (no JavaScript, no chart library)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

PALETTE = ("#3b6fd8", "#e3a21a", "#2f9e6b", "#b3261e", "#7b52c7", "#0f8aa3", "#c2587d", "#6b7a8f")


@dataclass(frozen=True)
class Bar:
    label: str
    x: float
    y: float
    width: float
    height: float
    colour: str
    value: str
    caption: str = ""
    """Written beside the bar, so the chart carries its numbers (not only in a tooltip)."""

    @property
    def end(self) -> float:
        return self.x + self.width


def quota_bars(
    rows: Sequence[tuple[str, int, int, int | None]], *, width: int = 560, row_height: int = 34
) -> tuple[list[Bar], int]:
    """Per flavor: the ceiling (light), the guarantee inside it (solid) and, when known, the
    allocation (a dark line). ``rows`` are (flavor, guarantee, ceiling, allocation or None)."""
    top = max([c for _, _, c, _ in rows] + [1])
    label_w, bars = 150, []
    scale = (width - label_w - 130) / top  # room on the right for the numbers
    for i, (flavor, guarantee, ceiling, allocation) in enumerate(rows):
        y = i * row_height + 6
        held = f" · {allocation} in use" if allocation is not None else ""
        caption = f"{guarantee} / {ceiling}{held}"
        bars.append(Bar(flavor, label_w, y, ceiling * scale, 22, "#c9d8f5", f"ceiling {ceiling}", caption))
        bars.append(Bar(flavor, label_w, y, guarantee * scale, 22, PALETTE[0], f"guarantee {guarantee}"))
        if allocation is not None:
            bars.append(
                Bar(flavor, label_w + allocation * scale - 1, y - 3, 3, 28, "#1d2430", f"allocated {allocation}")
            )
    return bars, len(rows) * row_height + 12


def stacked_capacity(
    flavors: Sequence[tuple[str, int, Sequence[tuple[str, int]], int, int]], *, width: int = 560, row_height: int = 34
) -> tuple[list[Bar], list[tuple[str, str]], int]:
    """Per flavor, how its physical devices are spoken for: each department's guarantee, what is
    left to promise, reservations and headroom. ``flavors`` are (flavor, physical, [(department,
    guarantee)], reserved, headroom). Returns the bars, the legend and the height."""
    top = max([p for _, p, _, _, _ in flavors] + [1])
    label_w = 150
    scale = (width - label_w - 110) / top  # room on the right for the numbers
    colours: dict[str, str] = {}
    bars = []
    for i, (flavor, physical, parts, reserved, headroom) in enumerate(flavors):
        y, x = i * row_height + 6, float(label_w)
        promised = sum(g for _, g in parts)
        segments = [
            *parts,
            ("left to promise", max(0, physical - reserved - headroom - promised)),
            ("reserved", reserved),
            ("headroom", headroom),
        ]
        for name, value in segments:
            colour = colours.setdefault(
                name,
                {"left to promise": "#e8ecf1", "reserved": "#8a94a3", "headroom": "#c1c7d0"}.get(
                    name, PALETTE[len(colours) % len(PALETTE)]
                ),
            )
            bars.append(Bar(flavor, x, y, value * scale, 22, colour, f"{name}: {value}"))
            x += value * scale
        left = max(0, physical - reserved - headroom - promised)
        bars[-1] = replace(bars[-1], caption=f"{promised} promised · {left} left")
    return bars, list(colours.items()), len(flavors) * row_height + 12


@dataclass(frozen=True)
class Segment:
    left: float
    """% of the track from its start."""
    width: float
    """% of the track."""
    colour: str
    value: str
    marker: bool = False
    """A thin full-height mark (the allocation), not a bar."""


@dataclass(frozen=True)
class BarRow:
    label: str
    segments: list[Segment]
    caption: str


def bar_rows(bars: Sequence[Bar]) -> list[BarRow]:
    """The same bars as HTML rows (label, a track of segments in % of the widest, the numbers), so the
    text stays at the page's size at every width: an SVG scaled to the window made it twice as large at
    1440 px and too small to read at 390 px."""
    if not bars:
        return []
    start = min(b.x for b in bars)
    extent = max(b.end - start for b in bars) or 1.0
    rows: dict[str, BarRow] = {}
    for b in bars:
        row = rows.setdefault(b.label, BarRow(b.label, [], ""))
        marker = b.width <= 3
        row.segments.append(
            Segment(100 * (b.x - start) / extent, 0 if marker else 100 * b.width / extent, b.colour, b.value, marker)
        )
        if b.caption:
            rows[b.label] = replace(row, caption=b.caption)
    return list(rows.values())
