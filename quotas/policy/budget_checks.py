"""The invariants of GPU-hour budgets, checked on every edit like quotas' (see .budgets). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from .budgets import MAX_DEVICE_HOURS, MAX_OVERSUBSCRIPTION, Budget, BudgetKey, period_bounds
from .violations import Violation, ViolationCode


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
