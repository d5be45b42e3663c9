"""The replay format: per-unit time series, one row per unit, flavor and minute.

    minute,unit,flavor,quota,held,queued
    2020-05-01T00:00,vc6YE,v100,208,162,0

``minute`` is ISO 8601 (UTC unless it carries an offset), ``unit`` a key the loader maps to an Allot
unit, ``flavor`` a flavor name, ``quota`` the unit's guarantee that minute, ``held`` devices held by
running workloads, ``queued`` devices asked for by waiting ones; whole numbers, never negative. A
minute with no row for a unit is a gap in telemetry, not an idle minute. Used for backtesting and
by the demo (a real month of the Helios "Earth" cluster, accounting/demo_data/).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .sacct import LineProblem

COLUMNS = ("minute", "unit", "flavor", "quota", "held", "queued")
SKEW = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class ReplayRow:
    at: datetime
    unit: str
    flavor: str
    quota: int
    held: int
    queued: int


def parse_replay(lines: Iterable[str], *, now: datetime) -> Iterator[ReplayRow | LineProblem]:
    """Rows, or LineProblems naming the column and the fix. A header other than COLUMNS stops the read
    at line 1 (nothing else can be trusted); a minute later than ``now`` is clock skew."""
    rows = iter(lines)
    header = next(rows, "").strip()
    if tuple(h.strip() for h in header.split(",")) != COLUMNS:
        yield LineProblem(1, header[:200], f"the header must be {','.join(COLUMNS)}")
        return
    minutes: dict[str, datetime] = {}  # each minute is read once, not once per unit
    for number, raw in enumerate(rows, 2):
        text = raw.strip()
        if not text:
            continue
        parts = text.split(",")
        if len(parts) != len(COLUMNS):
            yield LineProblem(number, text[:200], f"{len(parts)} columns, expected {len(COLUMNS)}")
            continue
        at = minutes.get(parts[0])
        if at is None:
            try:
                at = datetime.fromisoformat(parts[0])
            except ValueError:
                yield LineProblem(number, text[:200], f"minute {parts[0]!r} is not ISO 8601 (2020-05-01T00:00)")
                continue
            at = (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC).replace(second=0, microsecond=0)
            if len(minutes) > 100_000:
                minutes.clear()
            minutes[parts[0]] = at
        if at > now + SKEW:
            yield LineProblem(number, text[:200], f"minute {parts[0]} is in the future: clock skew at the source")
            continue
        try:
            quota, held, queued = (int(v) for v in parts[3:])
        except ValueError:
            yield LineProblem(number, text[:200], "quota, held and queued must be whole numbers")
            continue
        if min(quota, held, queued) < 0:
            yield LineProblem(number, text[:200], "quota, held and queued cannot be negative")
            continue
        if not parts[1] or not parts[2]:
            yield LineProblem(number, text[:200], "unit and flavor are required")
            continue
        yield ReplayRow(at, parts[1], parts[2], quota, held, queued)
