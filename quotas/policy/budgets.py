"""GPU-hour budgets: how many device-hours a unit may spend on a flavor per period (pure).

A budget belongs to a unit and a flavor. Its **allowance** in a period is its device-hours plus what
it carried over from the period before (the unused part of that period's budget, at most the carry-
over cap). **Spend** is allocated device-hours of the unit's subtree from the hourly rollups:
hours inside the guarantee count whole, borrowed hours count :data:`BORROWED_FACTOR` — the same
``UsageFactor`` the Slurm burst QOS carries, so a budget spends alike on both schedulers.

When spend reaches the allowance the budget's **action** applies until the period ends or the budget
is raised:

* ``report`` — a finding and mail, nothing enforced;
* ``no-borrowing`` — the unit keeps its guarantee but may not borrow (Kueue ``borrowingLimit: 0``;
  Slurm: its burst QOS hold no GPUs);
* ``hold`` — no new workloads of the covered tiers start; running ones finish (Kueue LocalQueue
  ``stopPolicy: Hold``; Slurm: ``GrpTRESMins`` on a ``NoDecay`` QOS, jobs pend with Slurm's reason);
* ``deny`` — the admission webhook and job_submit.lua refuse new ones, naming the budget.

Invariants (checked on every edit, like quotas): device-hours, cap and warn threshold in range; the
tiers name known tiers, at least one; a budget starts in the current period or later; children's
budgets on a flavor add up to no more than the parent's times its oversubscription factor (same
period kind); a budget is never set below what its unit already spent this period.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from types import MappingProxyType

from .violations import Violation, ViolationCode

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
    usage of its QOS was last reset — what Slurm's ``NoDecay`` QOS counted (see :func:`slurm_minutes`)."""

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


# ----------------------------------------------------------------------------------------- checks


def check_budget_edits(
    edits: Mapping[BudgetKey, Budget | None],
    *,
    budgets: Mapping[BudgetKey, Budget],
    parents: Mapping[int, int | None],
    paths: Mapping[int, str],
    tiers: Iterable[str],
    spent: Mapping[BudgetKey, float],
    now: datetime,
) -> list[Violation]:
    """Violations of the budget invariants once ``edits`` (None: removed) are laid over ``budgets``.

    ``budgets`` holds at least the edited units' parents' and children's budgets on the flavors
    edited; ``parents`` and ``paths`` every unit they name; ``spent`` this period's spend per key."""
    view = {**budgets, **edits}
    known_tiers = set(tiers)
    problems: list[Violation] = []
    touched: set[BudgetKey] = set()
    for key, budget in edits.items():
        unit_id, flavor = key
        touched.add(key)
        parent = parents.get(unit_id)
        if parent is not None:
            touched.add((parent, flavor))
        if budget is None:
            continue
        problems += _own(budget, paths.get(unit_id, f"#{unit_id}"), known_tiers, spent.get(key, 0.0), now)
    for unit_id, flavor in sorted(touched):
        parent_budget = view.get((unit_id, flavor))
        if parent_budget is None:
            continue
        children = [
            b
            for (uid, f), b in view.items()
            if b is not None and f == flavor and parents.get(uid) == unit_id and uid != unit_id
        ]
        problems += _children(parent_budget, children, paths)
    return sorted(problems, key=lambda v: (v.unit or "", v.flavor or "", v.field or "", v.message))


def _own(budget: Budget, path: str, tiers: set[str], spent: float, now: datetime) -> list[Violation]:
    def bad(field: str, message: str, hint: str, limit: int | None = None, actual: int | None = None) -> Violation:
        return Violation(
            ViolationCode.BUDGET_INVALID,
            f"{path} budget on {budget.flavor}: {message}",
            hint,
            unit=path,
            flavor=budget.flavor,
            field=field,
            limit=limit,
            actual=actual,
        )

    found = []
    if budget.device_hours < 0 or budget.device_hours > MAX_DEVICE_HOURS:
        found.append(
            bad("device_hours", f"{budget.device_hours} device-hours is out of range", "give 0 or more device-hours")
        )
    if not 1 <= budget.warn_percent <= 100:
        found.append(bad("warn_percent", f"warn at {budget.warn_percent} %", "give a threshold from 1 to 100 %"))
    if budget.carry_over_cap < 0 or budget.carry_over_cap > max(0, budget.device_hours):
        found.append(
            bad(
                "carry_over_cap",
                f"a carry-over cap of {budget.carry_over_cap} device-hours is outside 0–{budget.device_hours}",
                "cap carry-over at most at the budget itself (0: no carry-over)",
                budget.device_hours,
                budget.carry_over_cap,
            )
        )
    if not 1.0 <= budget.oversubscription <= MAX_OVERSUBSCRIPTION:
        found.append(
            bad(
                "oversubscription",
                f"an oversubscription factor of {budget.oversubscription:g}",
                f"give a factor from 1 (children add up to at most this budget) to {MAX_OVERSUBSCRIPTION:g}",
            )
        )
    unknown = sorted(t for t in budget.tiers if t not in tiers)
    if not budget.tiers or unknown:
        found.append(
            bad(
                "tiers",
                f"unknown tiers {', '.join(unknown)}" if unknown else "it covers no tier",
                f"name at least one of the tiers {', '.join(sorted(tiers)) or '(none defined)'}",
            )
        )
    if budget.starts is not None:
        start, _ = period_bounds(budget.period, now)
        first, _ = period_bounds(budget.period, datetime(*budget.starts.timetuple()[:3], tzinfo=UTC))
        if budget.starts < start.date():
            found.append(
                bad(
                    "starts",
                    f"it would start on {budget.starts.isoformat()}, in a period already over",
                    f"start it on {start.date().isoformat()} (this {budget.period}) or later",
                )
            )
        elif first.date() != budget.starts:
            found.append(
                bad(
                    "starts",
                    f"{budget.starts.isoformat()} is not the first day of a {budget.period}",
                    f"start it on {first.date().isoformat()} or on the first day of a later {budget.period}",
                )
            )
    if (
        budget.device_hours >= 0
        and spent > budget.device_hours
        and (budget.starts is None or budget.starts <= now.date())
    ):
        found.append(
            Violation(
                ViolationCode.BUDGET_BELOW_SPENT,
                f"{path} already spent {spent:,.0f} device-hours on {budget.flavor} this {budget.period}: "
                f"a budget of {budget.device_hours:,} is below that",
                f"give at least {int(-(-spent // 1)):,} device-hours, or lower it next {budget.period}",
                unit=path,
                flavor=budget.flavor,
                field="device_hours",
                limit=budget.device_hours,
                actual=round(spent),
            )
        )
    return found


def _children(parent: Budget, children: list[Budget], paths: Mapping[int, str]) -> list[Violation]:
    path = paths.get(parent.unit_id, f"#{parent.unit_id}")
    found: list[Violation] = []
    if parent.device_hours < 0:
        return found  # its own check says so
    other = sorted({paths.get(c.unit_id, f"#{c.unit_id}") for c in children if c.period is not parent.period})
    if other:
        found.append(
            Violation(
                ViolationCode.BUDGET_PERIOD_MISMATCH,
                f"{', '.join(other)} count per another period than {path}'s {parent.period} budget on {parent.flavor}",
                f"give budgets under {path} on {parent.flavor} the period {parent.period!s}",
                unit=path,
                flavor=parent.flavor,
                field="period",
            )
        )
    total = sum(c.device_hours for c in children if c.period is parent.period)
    limit = int(parent.device_hours * parent.oversubscription)
    if total > limit:
        factor = f" × oversubscription {parent.oversubscription:g}" if parent.oversubscription != 1 else ""
        found.append(
            Violation(
                ViolationCode.BUDGETS_EXCEED_PARENT,
                f"budgets under {path} on {parent.flavor} add up to {total:,} device-hours, above its "
                f"{parent.device_hours:,}{factor} = {limit:,}",
                f"lower the children's budgets by {total - limit:,}, raise {path}'s, "
                "or set its oversubscription factor",
                unit=path,
                flavor=parent.flavor,
                field="device_hours",
                limit=limit,
                actual=total,
            )
        )
    return found


# ------------------------------------------------------------------------------------ enforcement


def in_force(
    budgets: Mapping[BudgetKey, Budget], spends: Mapping[BudgetKey, BudgetSpend], now: datetime
) -> list[Budget]:
    """Budgets spent this period whose action enforces something, sorted."""
    found = []
    for key, budget in sorted(budgets.items()):
        spend = spends.get(key)
        if budget.action is BudgetAction.REPORT or spend is None or not spend.exhausted:
            continue
        if spend.period_start != period_bounds(budget.period, now)[0]:
            continue  # last period's state: the new period starts afresh
        if budget.starts is not None and budget.starts > now.date():
            continue
        found.append(budget)
    return found


def subtree_ids(children: Mapping[int | None, Iterable[int]], unit_id: int) -> tuple[int, ...]:
    """``unit_id`` and every unit under it, sorted: what a budget on it counts and stops."""
    found, pending = [], [unit_id]
    while pending:
        uid = pending.pop()
        found.append(uid)
        pending.extend(children.get(uid, ()))
    return tuple(sorted(found))


def covers_all(budget: Budget, tiers: Iterable[str]) -> bool:
    return set(tiers) <= set(budget.tiers)


def slurm_minutes(
    budgets: Mapping[BudgetKey, Budget],
    spends: Mapping[BudgetKey, BudgetSpend],
    children: Mapping[int | None, Iterable[int]],
    now: datetime,
) -> dict[tuple[int, str, str], int]:
    """``GrpTRESMins`` (device-minutes) per (unit id, flavor, "guar" | "burst") QOS under a hold or
    deny budget.

    A Slurm job runs under one QOS, and a unit's jobs under its guarantee or its burst QOS (its
    children's under theirs), so no single QOS sees a budget's whole spend. Each QOS of the budget's
    subtree gets ``what it counted since its usage was reset + what is left of the budget``: Slurm
    stops it exactly when the subtree's spend reaches the allowance, up to what the other QOS spent
    since the last evaluation (re-evaluated at each rollup). Burst QOS count their usage × their
    ``UsageFactor``, as the budget counts borrowed hours, so the two stay consistent. A QOS under
    several budgets gets the smallest.
    """
    limits: dict[tuple[int, str, str], int] = {}
    for key, budget in sorted(budgets.items()):
        if budget.action not in (BudgetAction.HOLD, BudgetAction.DENY):
            continue
        if budget.starts is not None and budget.starts > now.date():
            continue
        spend = spends.get(key)
        current = spend is not None and spend.period_start == period_bounds(budget.period, now)[0]
        allowance = spend.allowance if spend is not None and current else float(budget.device_hours)
        left = max(0.0, allowance - (spend.spent if spend is not None and current else 0.0))
        by_unit = spend.by_unit if spend is not None and current else {}
        for uid in subtree_ids(children, budget.unit_id):
            within, borrowed = by_unit.get(uid, (0.0, 0.0))
            for kind, counted in (("guar", within), ("burst", borrowed)):
                minutes = int((counted + left) * 60)
                qos = (uid, budget.flavor, kind)
                limits[qos] = min(limits.get(qos, minutes), minutes)
    return limits


@dataclass(frozen=True, slots=True)
class Effect:
    """What a spent budget changes on the clusters until its period ends or it is raised."""

    unit_id: int
    flavor: str
    action: BudgetAction
    units: tuple[int, ...]
    """The budget's unit and everything under it."""
    queue_hold: bool
    """``hold`` covering every tier: the subtree's LocalQueues stop (``stopPolicy: Hold``); a hold
    that spares a tier is enforced at admission instead (a LocalQueue holds all its workloads)."""
    tiers: tuple[str, ...]
    resets: datetime


def effects(
    budgets: Mapping[BudgetKey, Budget],
    spends: Mapping[BudgetKey, BudgetSpend],
    children: Mapping[int | None, Iterable[int]],
    tiers: Iterable[str],
    now: datetime,
) -> list[Effect]:
    """Every spent budget's effect now, sorted (unit, flavor)."""
    names = tuple(tiers)
    found = []
    for budget in in_force(budgets, spends, now):
        found.append(
            Effect(
                budget.unit_id,
                budget.flavor,
                budget.action,
                subtree_ids(children, budget.unit_id),
                budget.action is BudgetAction.HOLD and covers_all(budget, names),
                budget.tiers,
                period_bounds(budget.period, now)[1],
            )
        )
    return found
