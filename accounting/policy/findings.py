"""Hoarding and broken promises, found in the rollups: pure detectors over window totals, each finding
with its numbers, the cost at stake, a suggested action and a key that stays the same while the
condition persists (so a finding that lasts is one finding with a growing window).

The stance (seed 8.11–8.12): hold the guarantee, lend the idle part, bring the guarantee itself to
review — a detector never takes a guarantee away; it suggests a change request a lead approves.

Defaults come from what real tools use: Microsoft OpenPAI's low-utilisation notice (below 20 % over
5 days, Microsoft/pai#4266) for idle guarantees; Alibaba PAI-DSW's idle culler (GPU below 10 % for
60 minutes) for zombie allocations.

The detectors of capacity held without use (reservations, zombies, stuck workloads) and of contracts not
honoured are in .hold_findings."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from enum import StrEnum
from typing import Any

CENT = Decimal("0.01")


class FindingKind(StrEnum):
    IDLE_GUARANTEE = "idle_guarantee"
    DEMAND_ABOVE_GUARANTEE = "demand_above_guarantee"
    IDLE_RESERVATION = "idle_reservation"
    ZOMBIE_ALLOCATION = "zombie_allocation"
    STUCK_RESERVATION = "stuck_reservation"
    CONTRACT_NOT_HONOURED = "contract_not_honoured"
    BUDGET_WARN = "budget_warn"
    BUDGET_FORECAST = "budget_forecast"
    BUDGET_SPENT = "budget_spent"
    CONSUMPTION_ANOMALY = "consumption_anomaly"
    FRAGMENTATION = "fragmentation"
    OVER_SPECIFIED = "over_specified"
    STRANDED_POOL = "stranded_pool"
    KUEUE_DISAGREES = "kueue_disagrees"
    QUOTA_HELD_BY_CHECKS = "quota_held_by_checks"


BUDGET_KINDS = frozenset({FindingKind.BUDGET_WARN, FindingKind.BUDGET_FORECAST, FindingKind.BUDGET_SPENT})
"""Found after each budget evaluation (accounting.policy.budget_findings), not by the daily detectors."""


@dataclass(frozen=True)
class Thresholds:
    idle_used_below: float = 0.20
    """Idle guarantee: used less than this share of its own guarantee over the window…"""
    idle_window_days: int = 5
    """The days the idle-guarantee, demand and zombie detectors look back over."""
    demand_share_above: float = 0.25
    """Demand above guarantee: held + queued above the guarantee in at least this share of hours…"""
    demand_borrowed_below: float = 0.10
    """…while it borrowed less than this share of its guarantee."""
    zombie_active_below: float = 0.10
    """Zombie: devices held with activity below this share…"""
    zombie_minutes: int = 60
    """…for at least this long."""
    stuck_minutes: int = 10
    """A Kueue Workload evicted for this long that still holds its quota reservation."""
    reservation_window_days: int = 7
    """The days the idle-reservation detector looks back over."""
    anomaly_factor: float = 3.0
    """Consumption anomaly: a unit's device-hours in the window at this many times its norm…"""
    anomaly_weeks: int = 4
    """…the norm being its mean over this many weeks before, for the same hours of the week…"""
    anomaly_window_hours: int = 24
    """…the window compared being the last this many hours…"""
    anomaly_min_device_hours: float = 24.0
    """…and at least this many device-hours above the norm (small units' noise is not an anomaly)."""
    fragmentation_index_above: float = 0.5
    """Fragmentation: free GPUs of which more than this share no waiting shape could use…"""
    fragmentation_hours: int = 6
    """…in at least this many of the last 24 hourly samples."""

    def problems(self) -> list[str]:
        """Every threshold out of range, named, with its range."""
        found = []
        for name in ("idle_used_below", "demand_share_above", "demand_borrowed_below", "zombie_active_below"):
            value = getattr(self, name)
            if not 0 < value < 1:
                found.append(f"{name} = {value}: give a share between 0 and 1 (e.g. 0.2 for 20 %)")
        for name in ("idle_window_days", "reservation_window_days"):
            if not 1 <= getattr(self, name) <= 92:
                found.append(f"{name} = {getattr(self, name)}: give 1 to 92 days")
        for name in ("zombie_minutes", "stuck_minutes"):
            if not 1 <= getattr(self, name) <= 7 * 24 * 60:
                found.append(f"{name} = {getattr(self, name)}: give 1 minute to 7 days")
        if not 1 < self.anomaly_factor <= 100:
            found.append(f"anomaly_factor = {self.anomaly_factor}: give a factor above 1 (e.g. 3)")
        if not 1 <= self.anomaly_weeks <= 12:
            found.append(f"anomaly_weeks = {self.anomaly_weeks}: give 1 to 12 weeks")
        if not 1 <= self.anomaly_window_hours <= 7 * 24:
            found.append(f"anomaly_window_hours = {self.anomaly_window_hours}: give 1 to 168 hours")
        if not 0 < self.fragmentation_index_above < 1:
            found.append(f"fragmentation_index_above = {self.fragmentation_index_above}: give a share between 0 and 1")
        if not 1 <= self.fragmentation_hours <= 24:
            found.append(f"fragmentation_hours = {self.fragmentation_hours}: give 1 to 24 hours")
        if self.anomaly_min_device_hours < 0:
            found.append(f"anomaly_min_device_hours = {self.anomaly_min_device_hours}: give 0 or more")
        return found

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass(frozen=True)
class UnitWindow:
    """A unit on a flavor over the detection window (device-hours, from the hourly rollups)."""

    unit: int
    flavor: int
    path: str
    flavor_key: str
    guarantee: int
    """Its guarantee now (devices)."""
    lendable: int
    children_guarantee: int
    """What its children's guarantees take of it: the smallest guarantee a suggestion may give."""
    guarantee_h: float
    """Its own guarantee-hours (children's taken out)."""
    within_h: float
    borrowed_h: float
    lent_h: float
    pending_h: float
    hours: int
    """Hours with telemetry."""
    expected_hours: int
    hours_demand_above: int
    """Hours in which held + queued was above its guarantee."""
    p95_held: float
    p95_demand: float
    """95th percentile of devices held + queued per hour."""
    others_waiting_hours: int
    """Hours in which another unit on the flavor queued or borrowed."""
    price: Decimal | None
    daily: Sequence[tuple[str, float, float]] = ()
    """Per day: held and queued devices (averages), for the evidence chart."""

    @property
    def partial(self) -> bool:
        return self.hours < self.expected_hours


@dataclass(frozen=True)
class Found:
    kind: FindingKind
    key: str
    unit: int | None
    flavor: int | None
    start: datetime
    end: datetime
    summary: str
    evidence: Mapping[str, Any]
    cost: Decimal | None
    suggestion: str
    action: Mapping[str, Any] | None = None
    """A quota change a lead can turn into a change request: unit, flavor, guarantee and/or lendable."""
    partial: bool = False


def money_at(price: Decimal | None, device_hours: float) -> Decimal | None:
    if price is None:
        return None
    return (price * Decimal(repr(max(0.0, device_hours)))).quantize(CENT, ROUND_HALF_UP)


def _coverage(w: UnitWindow) -> dict[str, Any]:
    return {"hours_with_telemetry": w.hours, "hours_in_window": w.expected_hours, "partial": w.partial}


def idle_guarantees(windows: Iterable[UnitWindow], th: Thresholds, start: datetime, end: datetime) -> list[Found]:
    """A unit that used less than ``idle_used_below`` of its own guarantee over the window while
    others on the flavor queued or borrowed: lend the idle part, or bring the guarantee to review."""
    found = []
    for w in windows:
        if w.guarantee_h <= 0 or not w.hours or w.within_h >= th.idle_used_below * w.guarantee_h:
            continue
        if not w.others_waiting_hours:
            continue  # idle, but nobody wanted it: no opportunity lost
        idle_h = max(0.0, w.guarantee_h - w.within_h - w.lent_h)
        used = w.within_h / w.guarantee_h
        evidence = {
            "used_share": round(used, 4),
            "guarantee": w.guarantee,
            "guarantee_h": round(w.guarantee_h, 1),
            "used_h": round(w.within_h, 1),
            "lent_h": round(w.lent_h, 1),
            "idle_h": round(idle_h, 1),
            "p95_held": round(w.p95_held, 1),
            "others_waiting_hours": w.others_waiting_hours,
            "daily": list(w.daily),
            **_coverage(w),
        }
        if w.lendable < w.guarantee:
            suggestion = (
                f"Lend the idle part: raise lendable on {w.flavor_key} from {w.lendable} to {w.guarantee}; the "
                f"guarantee stays, and comes back within the contract's reclaim time when {w.path} needs it."
            )
            action: dict[str, Any] | None = {"unit": w.unit, "flavor": w.flavor, "lendable": w.guarantee}
        else:
            smaller = max(w.children_guarantee, math.ceil(w.p95_held))
            suggestion = (
                f"Review the guarantee: all of it is lendable already and {used:.0%} was used; 95 % of hours "
                f"held {w.p95_held:.1f} devices or fewer — a guarantee of {smaller} would cover them."
            )
            action = (
                {"unit": w.unit, "flavor": w.flavor, "guarantee": smaller, "lendable": smaller}
                if smaller < w.guarantee
                else None
            )
        found.append(
            Found(
                FindingKind.IDLE_GUARANTEE,
                f"{FindingKind.IDLE_GUARANTEE}:{w.unit}:{w.flavor}",
                w.unit,
                w.flavor,
                start,
                end,
                f"{w.path} used {used:.0%} of its guarantee on {w.flavor_key} while others queued or borrowed "
                f"in {w.others_waiting_hours} h",
                evidence,
                money_at(w.price, idle_h),
                suggestion,
                action,
                w.partial,
            )
        )
    return found


def demand_above_guarantee(
    windows: Iterable[UnitWindow], th: Thresholds, start: datetime, end: datetime
) -> list[Found]:
    """A unit whose held + queued devices were above its guarantee in at least ``demand_share_above``
    of the hours while it borrowed little: its guarantee is too small for what it runs."""
    found = []
    for w in windows:
        if w.guarantee <= 0 or not w.hours or w.hours_demand_above < th.demand_share_above * w.hours:
            continue
        if w.borrowed_h >= th.demand_borrowed_below * max(w.guarantee_h, 1e-9):
            continue
        larger = max(w.guarantee + 1, math.ceil(w.p95_demand))
        share = w.hours_demand_above / w.hours
        found.append(
            Found(
                FindingKind.DEMAND_ABOVE_GUARANTEE,
                f"{FindingKind.DEMAND_ABOVE_GUARANTEE}:{w.unit}:{w.flavor}",
                w.unit,
                w.flavor,
                start,
                end,
                f"{w.path} wanted more than its guarantee of {w.guarantee} on {w.flavor_key} in {share:.0%} of hours "
                f"and borrowed little",
                {
                    "hours_above": w.hours_demand_above,
                    "share_above": round(share, 4),
                    "p95_demand": round(w.p95_demand, 1),
                    "guarantee": w.guarantee,
                    "queued_h": round(w.pending_h, 1),
                    "borrowed_h": round(w.borrowed_h, 1),
                    "daily": list(w.daily),
                    **_coverage(w),
                },
                money_at(w.price, w.pending_h),
                f"Grow the guarantee to {larger} (95 % of hours wanted {w.p95_demand:.1f} devices or fewer), or "
                f"find the lender: its work waited {w.pending_h:.0f} device-hours in the queue.",
                {"unit": w.unit, "flavor": w.flavor, "guarantee": larger},
                w.partial,
            )
        )
    return found


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``values``; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Detected:
    findings: list[Found] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
