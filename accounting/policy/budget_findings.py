"""Warnings before a budget bites: pure detectors over evaluated budgets (quotas.policy.budgets).

Three findings a budget and period, each opened once and mailed to the unit's leads:

- ``budget_warn``: spend passed the warn threshold;
- ``budget_forecast``: at the trailing burn rate the budget runs out before the period ends ("at
  this rate vision spends its a100 budget on the 19th");
- ``budget_spent``: spend reached the allowance; its action is in force until the period resets.

Each suggests raising the budget to what the trailing rate would spend by the period's end (rounded
up to a hundred device-hours), as a one-click change request; the alternative is to let it bite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from accounting.policy.findings import FindingKind, Found
from quotas.policy import budgets as bud


@dataclass(frozen=True)
class BudgetState:
    budget_id: int
    unit_id: int
    unit_path: str
    flavor_id: int
    budget: bud.Budget
    status: bud.BudgetStatus


def ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def needed(state: BudgetState, now: datetime) -> int:
    """Device-hours of budget that would last the period at the trailing rate: what it has been given
    beyond ``device_hours`` (carried over) stays; rounded up to a hundred."""
    s = state.status
    days_left = max(0.0, (s.period_end - now).total_seconds() / 86400)
    total = s.spent + s.rate_per_day * days_left - (s.allowance - state.budget.device_hours)
    return max(state.budget.device_hours + 100, int(math.ceil(total / 100.0) * 100))


def _action(state: BudgetState, now: datetime) -> dict[str, int | str]:
    return {"kind": "budget", "unit": state.unit_id, "flavor": state.flavor_id, "device_hours": needed(state, now)}


def budget_findings(states: list[BudgetState], now: datetime) -> list[Found]:
    """The findings each budget's evaluated period calls for (keys: kind, budget and period start)."""
    return [found for state in states for found in _findings(state, now)]


def _findings(state: BudgetState, now: datetime) -> list[Found]:
    s, b = state.status, state.budget
    name = state.unit_path.rsplit("/", 1)[-1]
    period = f"{s.period_start:%Y-%m-%d}"
    evidence = {
        "budget_id": state.budget_id,
        "period": b.period.value,
        "period_start": period,
        "period_end": f"{s.period_end:%Y-%m-%d}",
        "allowance_h": round(s.allowance, 1),
        "spent_h": round(s.spent, 1),
        "remaining_h": round(s.remaining, 1),
        "percent": s.percent,
        "burn_rate_per_day": round(s.rate_per_day, 1),
        "forecast_exhaustion": s.exhausts_at.isoformat() if s.exhausts_at else None,
        "action_when_spent": b.action.value,
    }
    raise_to = needed(state, now)
    action = _action(state, now)

    def finding(kind: FindingKind, summary: str, suggestion: str) -> Found:
        key = f"{kind.value}:{state.budget_id}:{period}"
        return Found(
            kind, key, state.unit_id, state.flavor_id, s.period_start, now, summary, evidence, None, suggestion, action
        )

    if s.level is bud.BudgetLevel.SPENT:
        return [
            finding(
                FindingKind.BUDGET_SPENT,
                f"{name} has spent its {b.flavor} budget: {s.spent:,.0f} of {s.allowance:,.0f} device-hours "
                f"({b.action.value} until {s.period_end:%d %b})",
                f"Raise it to {raise_to:,} device-hours for this {b.period.value} if the work is intended; until "
                f"then, or until the period resets on {s.period_end:%d %b %Y}, {bud.when_spent(b)}.",
            )
        ]
    found = []
    if s.exhausts_at is not None:
        found.append(
            finding(
                FindingKind.BUDGET_FORECAST,
                f"At this rate {name} spends its {b.flavor} budget on the {ordinal(s.exhausts_at.day)} "
                f"({s.rate_per_day:,.0f} device-hours a day; {s.remaining:,.0f} left)",
                f"Raise it to {raise_to:,} device-hours to last until {s.period_end:%d %b}, or slow down: once "
                f"it is spent, {bud.when_spent(b)}.",
            )
        )
    if s.level is bud.BudgetLevel.WARN:
        found.append(
            finding(
                FindingKind.BUDGET_WARN,
                f"{name} has spent {s.percent:.0f} % of its {b.flavor} budget ({s.spent:,.0f} of "
                f"{s.allowance:,.0f} device-hours; warns at {b.warn_percent} %)",
                f"{s.remaining:,.0f} device-hours are left until {s.period_end:%d %b}. Raise it to {raise_to:,} "
                "if the plan needs more.",
            )
        )
    return found
