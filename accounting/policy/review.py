"""The monthly governance review's judgement: one recommendation for every guarantee — keep, lend more,
shrink or grow — with the evidence a department head can check. Pure: a unit's month in, a
recommendation out.

The rule (seed 8.11: compare observed use, demand and the cost of the promise), in order:

1. **grow** — the unit's demand (held + queued) was above its guarantee in at least
   ``GROW_SHARE`` of the hours and its 95th percentile is above the guarantee: grow to that p95;
2. **shrink** — it used less than ``SHRINK_USED`` of its guarantee and even its 95th percentile of
   held devices stayed below half of it: shrink to that p95 (never below what its children hold);
3. **lend more** — it used less than ``LEND_USED`` of its guarantee and its lendable part is smaller
   than what 95 % of its hours never needed: make that part lendable (the guarantee stays);
4. **keep** — otherwise.

A month with too little telemetry (``MIN_COVERAGE``) is kept, and says why: no decision on a gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

GROW_SHARE = 0.25
SHRINK_USED = 0.35
LEND_USED = 0.65
MIN_COVERAGE = 0.5


class Verdict(StrEnum):
    KEEP = "keep"
    LEND_MORE = "lend more"
    SHRINK = "shrink"
    GROW = "grow"


@dataclass(frozen=True)
class UnitMonth:
    unit: int
    flavor: int
    path: str
    flavor_key: str
    guarantee: int
    burst: int
    lendable: int
    children_guarantee: int
    guarantee_h: float
    within_h: float
    hours: int
    """Hours with telemetry."""
    expected_hours: int
    hours_demand_above: int
    p95_held: float
    p95_demand: float


@dataclass(frozen=True)
class Recommendation:
    unit: int
    flavor: int
    verdict: Verdict
    evidence: str
    action: dict[str, Any] | None
    """The quota change it would request: unit, flavor, guarantee and/or lendable."""


def recommend(m: UnitMonth) -> Recommendation:
    used = m.within_h / m.guarantee_h if m.guarantee_h > 0 else 0.0
    coverage = m.hours / m.expected_hours if m.expected_hours else 0.0
    base = (
        f"used {used:.0%} of its guarantee of {m.guarantee}; p95 held {m.p95_held:.1f}, p95 held + queued "
        f"{m.p95_demand:.1f}; demand above the guarantee in {m.hours_demand_above} of {m.hours} hours"
    )
    if m.guarantee <= 0:
        return Recommendation(m.unit, m.flavor, Verdict.KEEP, "no guarantee on this flavor", None)
    if coverage < MIN_COVERAGE:
        return Recommendation(
            m.unit,
            m.flavor,
            Verdict.KEEP,
            f"telemetry for {coverage:.0%} of the month only: no decision on a gap",
            None,
        )
    if m.hours and m.hours_demand_above >= GROW_SHARE * m.hours and m.p95_demand > m.guarantee:
        target = math.ceil(m.p95_demand)
        return Recommendation(
            m.unit,
            m.flavor,
            Verdict.GROW,
            f"{base}: grow to {target}",
            {"unit": m.unit, "flavor": m.flavor, "guarantee": target},
        )
    if used < SHRINK_USED and m.p95_held < m.guarantee / 2:
        target = max(m.children_guarantee, math.ceil(m.p95_held))
        if target < m.guarantee:
            action = {"unit": m.unit, "flavor": m.flavor, "guarantee": target, "lendable": min(m.lendable, target)}
            return Recommendation(m.unit, m.flavor, Verdict.SHRINK, f"{base}: shrink to {target}", action)
    spare = m.guarantee - math.ceil(m.p95_held)
    if used < LEND_USED and spare > m.lendable:
        return Recommendation(
            m.unit,
            m.flavor,
            Verdict.LEND_MORE,
            f"{base}: make {spare} lendable (now {m.lendable}); the guarantee stays",
            {"unit": m.unit, "flavor": m.flavor, "lendable": spare},
        )
    return Recommendation(m.unit, m.flavor, Verdict.KEEP, base, None)
