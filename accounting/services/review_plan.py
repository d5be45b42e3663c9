"""The review's plan parts: one recommendation per unit × flavor from the governance plan (the same
verdict the findings, the portal and the API give), the plan's summary (what it changes, what it would
have done last month, what it cannot fix), the days without telemetry, the fleet's cost, and the
before/after picture."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from accounting.services.plan_report import PlanReport


def recommendation_row(
    report: PlanReport, path: str, key: str, flavor_id: int, verdict: dict[str, Any]
) -> dict[str, Any]:
    """The review's row for a unit on a flavor: the plan's item (its numbers, why, which items it needs)
    or why the plan keeps the quota."""
    index = verdict["item"]
    if index is None:
        return {
            "unit_path": path, "flavor": key, "verdict": "keep", "evidence": verdict["reason"], "guarantee_to": None,
            "burst_to": None, "lendable_to": None, "plan_item": None, "needs_plan": [], "change_request": None,
            "action": None,
        }  # fmt: skip
    item = report.plan.items[index]
    today, planned = report.today.get((item.unit, key)), report.planned.get((item.unit, key))
    effect = (
        f"; last month under the plan: queued {today.queued_h:,.0f} → {planned.queued_h:,.0f} device-hours, "
        f"idle guarantee {today.idle_guarantee_h:,.0f} → {planned.idle_guarantee_h:,.0f}"
        if today and planned
        else ""
    )
    return {
        "unit_path": path,
        "flavor": key,
        "verdict": item.verdict.value,
        "evidence": f"{sentence(item)}: {item.reason}{effect}",
        "guarantee_to": item.after.guarantee,
        "burst_to": item.after.burst,
        "lendable_to": item.after.lendable,
        "plan_item": index,
        "needs_plan": list(item.needs),
        "change_request": None,
        "action": {
            "unit": item.unit,
            "flavor": flavor_id,
            "guarantee": item.after.guarantee,
            "burst": item.after.burst,
            "lendable": item.after.lendable,
        },
    }


def sentence(item: Any) -> str:
    """``guarantee 64 → 40, lendable 0 → 22`` — what the item changes, in words people read."""
    parts = [
        f"{name} {getattr(item.before, name)} → {getattr(item.after, name)}"
        for name in ("guarantee", "burst", "lendable")
        if getattr(item.before, name) != getattr(item.after, name)
    ]
    return ", ".join(parts) or "no change"


def plan_summary(report: PlanReport) -> dict[str, Any]:
    """The review's cover: the plan in figures, backtested on the month, and what it cannot fix."""
    totals = report.totals()
    found = report.gain_range()
    scenarios = found["scenarios"]
    low = scenarios.get(found["conservative"]) if found["conservative"] else None
    high = max(scenarios.values(), key=lambda s: s["gain_h"]) if scenarios else None
    whole = scenarios.get("whole_jobs")
    return {
        "plan": {
            "items": len(report.items()),
            "headline": low,
            "upper": high if high is not low else None,
            "whole_jobs": whole if whole is not low and whole is not high else None,
            "range": found,
            "today": totals["today"],
            "with_plan": totals["plan"],
            "reproduce_err_pct": round(100 * report.reproduce_err, 4),
            "observed_allocated_h": round(report.observed_h, 1),
            "cannot_fix": [
                f"{u.parent} on {u.flavor}: {u.devices} more devices wanted by {', '.join(u.units[:5])} "
                f"({u.value_h:,.0f} device-hours of need); would have to give: {u.gives}"
                for u in report.unmet()
            ],
            "dropped": list(report.plan.dropped),
        }
    }


def gap_days(
    covered: Mapping[int, set[datetime]], flavors: Mapping[int, Any], start: datetime, end: datetime
) -> list[str]:
    """Days (UTC) in which some flavor with usage had an hour without telemetry."""
    days: set[str] = set()
    for fid in flavors:
        hour = start
        while hour < end:
            if hour not in covered.get(fid, set()):
                days.add(hour.date().isoformat())
            hour += timedelta(hours=1)
    return sorted(days)


def fleet_cost(flavors: Mapping[int, Any], hours: int) -> str | None:
    """What the flavors' devices cost over the month, used or not (devices × hours × price): the figure
    the units' costs are part of."""
    priced = [f for f in flavors.values() if f.price_per_device_hour]
    if not priced:
        return None
    total = sum((Decimal(f.physical_devices) * hours * f.price_per_device_hour for f in priced), Decimal(0))
    return f"{total:.2f}"
