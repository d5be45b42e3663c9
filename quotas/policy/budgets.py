"""GPU-hour budgets: how many device-hours a unit may spend on a flavor per period (pure).

A budget belongs to a unit and a flavor. Its **allowance** in a period is its device-hours plus what
it carried over from the period before (the unused part of that period's budget, at most the carry-
over cap). **Spend** is allocated device-hours of the unit's subtree from the hourly rollups:
hours inside the guarantee count whole, borrowed hours count :data:`BORROWED_FACTOR` — the same
``UsageFactor`` the Slurm burst QOS carries, so a budget spends alike on both schedulers.

When spend reaches the allowance the budget's **action** applies until the period ends or the budget
is raised (:mod:`.budget_effects`):

* ``report`` — a finding and mail, nothing enforced;
* ``no-borrowing`` — the unit keeps its guarantee but may not borrow (Kueue ``borrowingLimit: 0``;
  Slurm: its burst QOS hold no GPUs);
* ``hold`` — no new workloads of the covered tiers start; running ones finish (Kueue LocalQueue
  ``stopPolicy: Hold``; Slurm: ``GrpTRESMins`` on a ``NoDecay`` QOS, jobs pend with Slurm's reason);
* ``deny`` — the admission webhook and job_submit.lua refuse new ones, naming the budget.

Invariants (checked on every edit, like quotas, in :mod:`.budget_checks`): device-hours, cap and warn
threshold in range; the tiers name known tiers, at least one; a budget starts in the current period or later; children's
budgets on a flavor add up to no more than the parent's times its oversubscription factor (same
period kind); a budget is never set below what its unit already spent this period."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from types import MappingProxyType

BORROWED_FACTOR = 0.5
"""Borrowed device-hours count half: the Slurm burst QOS's ``UsageFactor`` (quotas.policy.slurm)."""


MAX_DEVICE_HOURS = 10**9


MAX_OVERSUBSCRIPTION = 10.0


class Period(StrEnum):
    MONTH = "month"
    QUARTER = "quarter"


class BudgetAction(StrEnum):
    REPORT = "report"
    NO_BORROWING = "no-borrowing"
    HOLD = "hold"
    DENY = "deny"


class BudgetLevel(StrEnum):
    OK = "ok"
    WARN = "warn"
    SPENT = "spent"


BudgetKey = tuple[int, str]
"""(unit id, flavor key)."""


@dataclass(frozen=True, slots=True)
class Budget:
    unit_id: int
    flavor: str
    device_hours: int
    period: Period = Period.MONTH
    action: BudgetAction = BudgetAction.REPORT
    tiers: tuple[str, ...] = ()
    """Tiers whose workloads it counts and stops; never empty (a serving tier only when named)."""
    warn_percent: int = 80
    carry_over_cap: int = 0
    """Device-hours of last period's unused budget it may carry over; 0: none."""
    oversubscription: float = 1.0
    """Its children's budgets on the flavor may add up to this times its own."""
    starts: date | None = None
    """The first day it counts (a period's first day); None: the current period."""

    @property
    def key(self) -> BudgetKey:
        return (self.unit_id, self.flavor)


@dataclass(frozen=True, slots=True)
class BudgetSpend:
    """A budget's current period as last evaluated from the rollups."""

    period_start: datetime
    allowance: float
    spent: float
    by_unit: Mapping[int, tuple[float, float]] = field(default_factory=lambda: MappingProxyType({}))
    """Per unit of the subtree: (inside-guarantee, borrowed × factor) device-hours since Slurm's
    usage of its QOS was last reset — what Slurm's ``NoDecay`` QOS counted (see
    :func:`.budget_effects.slurm_minutes`)."""
    exhausted_at: datetime | None = None
    """When the evaluation found it spent (audited ``budget_exhausted``); None while it is not."""

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.allowance


def period_bounds(period: Period, at: datetime) -> tuple[datetime, datetime]:
    """The UTC period holding ``at``: [first instant, first instant of the next)."""
    at = at.astimezone(UTC)
    first_month = at.month if period is Period.MONTH else 3 * ((at.month - 1) // 3) + 1
    start = datetime(at.year, first_month, 1, tzinfo=UTC)
    months = 1 if period is Period.MONTH else 3
    year, month = divmod(first_month - 1 + months, 12)
    return start, datetime(at.year + year, month + 1, 1, tzinfo=UTC)


def default_tiers(priorities: Mapping[str, int]) -> list[str]:
    """The tiers a new budget covers: every tier but the highest-priority one (serving), which a
    budget stops only when someone names it."""
    ranked = sorted(priorities, key=lambda name: -priorities[name])
    return sorted(ranked[1:]) if len(ranked) > 1 else ranked


def held_seconds(
    exhausted_at: datetime | None, released_at: datetime | None, period_end: datetime, now: datetime
) -> int:
    """How long a spent budget's action was in force in its period: from running out to its release,
    the period's end, or now."""
    if exhausted_at is None:
        return 0
    until = released_at or min(now, period_end)
    return max(0, int((until - exhausted_at).total_seconds()))


def run_out(allowance: float, daily: Mapping[date, float]) -> tuple[date | None, float]:
    """The day cumulative spend (charged device-hours per UTC day) first reaches ``allowance``, and
    the total; None when it never does."""
    total, day_out = 0.0, None
    for day in sorted(daily):
        total += daily[day]
        if day_out is None and allowance > 0 and total >= allowance:
            day_out = day
    return day_out, total


def when_spent(budget: Budget) -> str:
    """What a spent budget does, in words: "new P1, P2 work is held"."""
    tiers = ", ".join(budget.tiers)
    return {
        BudgetAction.REPORT: "it is reported only",
        BudgetAction.NO_BORROWING: "it may not borrow",
        BudgetAction.HOLD: f"new {tiers} work is held",
        BudgetAction.DENY: f"new {tiers} work is refused",
    }[budget.action]


def carried_over(budget: Budget, previous_spent: float | None) -> float:
    """Unused device-hours of the previous period it brings along (0 without a cap, or when it had
    not started then: ``previous_spent`` None)."""
    if budget.carry_over_cap <= 0 or previous_spent is None:
        return 0.0
    return float(min(budget.carry_over_cap, max(0.0, budget.device_hours - previous_spent)))


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    allowance: float
    spent: float
    remaining: float
    percent: float
    rate_per_day: float
    """Trailing burn rate."""
    level: BudgetLevel
    exhausts_at: datetime | None
    """When the trailing rate spends the rest, if that falls before the period ends."""
    period_start: datetime
    period_end: datetime


def budget_status(
    budget: Budget, *, allowance: float, spent: float, rate_per_day: float, now: datetime
) -> BudgetStatus:
    start, end = period_bounds(budget.period, now)
    remaining = max(0.0, allowance - spent)
    percent = 100.0 * spent / allowance if allowance > 0 else (100.0 if spent > 0 else 0.0)
    if allowance <= spent:
        level = BudgetLevel.SPENT
    elif percent >= budget.warn_percent:
        level = BudgetLevel.WARN
    else:
        level = BudgetLevel.OK
    exhausts_at = None
    if level is not BudgetLevel.SPENT and rate_per_day > 0:
        when = now + timedelta(days=remaining / rate_per_day)
        exhausts_at = when if when < end else None
    return BudgetStatus(allowance, spent, remaining, round(percent, 1), rate_per_day, level, exhausts_at, start, end)


def burn_down(
    budget: Budget, *, allowance: float, spent: float, daily: Mapping[date, float], rate_per_day: float, now: datetime
) -> dict[str, list[tuple[datetime, float]]]:
    """The burn-down chart's three lines of device-hours left: ``budget`` (straight, the allowance to 0
    over the period), ``actual`` (at the end of each past day from ``daily``, then now: the evaluated
    ``spent``) and ``forecast`` (from now at the trailing rate, straight to 0 when that falls before the
    period ends — the same instant :func:`budget_status` gives — else to what is left at its end)."""
    start, end = period_bounds(budget.period, now)
    actual, left = [(start, allowance)], allowance
    day = start
    while day + timedelta(days=1) <= now:
        left -= daily.get(day.date(), 0.0)
        day += timedelta(days=1)
        actual.append((day, max(0.0, left)))
    remaining = max(0.0, allowance - spent)
    if now > actual[-1][0]:
        actual.append((now, remaining))
    forecast: list[tuple[datetime, float]] = []
    if rate_per_day > 0 and remaining > 0 and now < end:
        out = now + timedelta(days=remaining / rate_per_day)
        forecast = [(now, remaining), (out, 0.0) if out < end else (end, remaining - rate_per_day * _days(now, end))]
    return {"budget": [(start, allowance), (end, 0.0)], "actual": actual, "forecast": forecast}


def _days(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() / 86400
