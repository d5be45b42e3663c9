"""Budgets in the reports: per unit and flavor, a month's budget, spend, what is left, the forecast, and
the day it ran out — for showback (``budget_columns``) and the monthly review (``budget_month``).

Spend is what the evaluation charges (accounting.services.budgets: inside-guarantee hours whole,
borrowed at the burst QOS's factor), per UTC day of the budget's period up to the report's end, from
the hourly rollups in one grouped query. Where a subtree had no budget in the month, the review
replays one instead: a monthly budget of ``REPLAY_SHARE`` of each unit's guarantee-hours, to show a
department head what budgets would have done (the rows say ``basis: replay``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any

from django.db.models import Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from accounting.models import UsageHour
from accounting.services.budgets import budget_views
from quotas.history import quota_terms_as_of
from quotas.models import Budget, BudgetSpend, OrgUnit, Quota
from quotas.policy import budgets as bud
from quotas.selectors import subtree

REPLAY_SHARE = 0.8
"""The replayed budget: this share of each unit's guarantee-hours in the month."""
GPU = "nvidia.com/gpu"
Daily = dict[tuple[int, int], dict[date, float]]
"""(unit id, flavor id) → UTC day → charged device-hours of the unit and everything under it."""


def _daily(start: datetime, end: datetime, flavors: Iterable[int], wanted: set[tuple[int, int]]) -> Daily:
    """Charged device-hours per day of each wanted (unit, flavor), its subtree's rows carried up."""
    parents = dict(OrgUnit.objects.values_list("id", "parent_id"))
    rows = (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, flavor_id__in=list(flavors))
        .annotate(day=TruncDate("hour"))
        .values("unit_id", "flavor_id", "day")
        .annotate(w=Sum("within"), b=Sum("borrowed"))
    )
    out: Daily = defaultdict(lambda: defaultdict(float))
    for r in rows:
        charge = (r["w"] or 0.0) + bud.BORROWED_FACTOR * (r["b"] or 0.0)
        node: int | None = r["unit_id"]
        while node is not None:
            if (node, r["flavor_id"]) in wanted:
                out[(node, r["flavor_id"])][r["day"]] += charge
            node = parents.get(node)
    return out


def _row(
    path: str, flavor: str, basis: str, period: str, allowance: float, daily: Mapping[date, float], end: date
) -> dict[str, Any]:
    day_out, spent = bud.run_out(allowance, daily)
    return {
        "unit_path": path,
        "flavor": flavor,
        "basis": basis,
        "period": period,
        "allowance_h": round(allowance, 1),
        "spent_h": round(spent, 1),
        "remaining_h": round(max(0.0, allowance - spent), 1),
        "percent": round(100 * spent / allowance, 1) if allowance > 0 else None,
        "ran_out_on": day_out.isoformat() if day_out else None,
        "held_days": (end - day_out).days - 1 if day_out else 0,
        "forecast_exhaustion": None,
        "action": "",
    }


def budget_month(unit: OrgUnit, start: datetime, end: datetime, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """The budgets of ``unit``'s subtree over [start, end) (a month): each budget's period holding
    ``start``, its spend to the month's end (or now), the day it ran out and the whole days held after
    it (as recorded when Allot enforced it; else counted from the day), and its forecast while the
    period runs. With no budget in the subtree: the replay (module docstring)."""
    now = now or timezone.now()
    budgets = list(
        Budget.objects.filter(subtree("unit__path", unit.path), unit__archived_at__isnull=True).select_related(
            "unit", "flavor__cluster"
        )
    )
    if not budgets:
        return _replay(unit, start, end)
    views = {v.id: v for v in budget_views(paths=[unit.path], now=now)}
    bounds = {b.pk: bud.period_bounds(bud.Period(b.period), start) for b in budgets}
    recorded = {
        s.budget_id: s
        for s in BudgetSpend.objects.filter(budget_id__in=[b.pk for b in budgets], period_start__lte=start)
        .filter(period_end__gt=start)
        .order_by("period_start")
    }
    first = min(p for p, _ in bounds.values())
    daily = _daily(first, min(end, now), {b.flavor_id for b in budgets}, {(b.unit_id, b.flavor_id) for b in budgets})
    rows = []
    for b in sorted(budgets, key=lambda x: (x.unit.path, x.flavor.key)):
        pstart, pend = bounds[b.pk]
        spend = recorded.get(b.pk)
        allowance = spend.allowance if spend else float(b.device_hours)
        days = {d: h for d, h in daily.get((b.unit_id, b.flavor_id), {}).items() if pstart.date() <= d < pend.date()}
        row = _row(b.unit.path, b.flavor.key, "budget", b.period, allowance, days, min(end, pend).date())
        if spend is not None and spend.exhausted_at is not None:
            row["ran_out_on"] = spend.exhausted_at.date().isoformat()
            row["held_days"] = round(bud.held_seconds(spend.exhausted_at, spend.released_at, pend, now) / 86400, 1)
        view = views.get(b.pk)
        if view is not None and pstart <= now < pend and view.status.exhausts_at is not None:
            row["forecast_exhaustion"] = view.status.exhausts_at.date().isoformat()
        row["action"] = b.action
        rows.append(row)
    return rows


def _replay(unit: OrgUnit, start: datetime, end: datetime) -> list[dict[str, Any]]:
    hours = (end - start).total_seconds() / 3600
    quotas = list(
        Quota.objects.filter(subtree("unit__path", unit.path), resource=GPU)
        .filter(unit__archived_at__isnull=True)
        .select_related("unit", "flavor__cluster")
    )
    used = set(
        UsageHour.objects.filter(subtree("unit__path", unit.path), hour__gte=start, hour__lt=end)
        .values_list("flavor_id", flat=True)
        .distinct()
    )
    then = quota_terms_as_of(end, {q.pk: (q.guarantee, q.burst, q.lendable) for q in quotas})
    for q in quotas:  # the month's guarantees, not today's (a later approval never rewrites the month)
        q.guarantee = then[q.pk][0]
    quotas = [q for q in quotas if q.flavor_id in used and q.guarantee > 0]
    if not quotas:
        return []
    daily = _daily(start, end, used, {(q.unit_id, q.flavor_id) for q in quotas})
    period = f"replay: {REPLAY_SHARE:.0%} of the guarantee × the month's {hours:.0f} hours"
    return [
        _row(
            q.unit.path,
            q.flavor.key,
            "replay",
            period,
            REPLAY_SHARE * q.guarantee * hours,
            daily.get((q.unit_id, q.flavor_id), {}),
            end.date(),
        )
        for q in sorted(quotas, key=lambda x: (x.unit.path, x.flavor.key))
    ]


def budget_columns(start: datetime, end: datetime, within: str = "") -> dict[tuple[str, str], dict[str, Any]]:
    """Showback's budget columns per (unit path, flavor key): the budget whose period holds ``start``,
    spent to the report's end, remaining, forecast (only real budgets; no replay)."""
    now = timezone.now()
    scope = Q(unit__archived_at__isnull=True)
    if within:
        scope &= subtree("unit__path", within)
    units = {u.pk: u for u in OrgUnit.objects.filter(pk__in=Budget.objects.filter(scope).values("unit_id"))}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for root in _roots(units.values()):
        for row in budget_month(root, start, end, now=now):
            out[(row["unit_path"], row["flavor"])] = {
                "budget_h": row["allowance_h"],
                "budget_spent_h": row["spent_h"],
                "budget_remaining_h": row["remaining_h"],
                "budget_forecast": row["forecast_exhaustion"],
                "budget_ran_out_on": row["ran_out_on"],
            }
    return out


def _roots(units: Iterable[OrgUnit]) -> list[OrgUnit]:
    """The units not under another one of them (each subtree read once)."""
    found = sorted(units, key=lambda u: u.path)
    roots: list[OrgUnit] = []
    for u in found:
        if not any(u.path.startswith(f"{r.path}/") for r in roots):
            roots.append(u)
    return roots


BUDGET_COLUMNS = ("budget_h", "budget_spent_h", "budget_remaining_h", "budget_forecast", "budget_ran_out_on")


def with_budgets(report: dict[str, Any], start: datetime, end: datetime) -> dict[str, Any]:
    """A showback report (accounting.selectors.showback.showback_report) with each line's budget columns: the
    unit's budget on the flavor (its subtree's spend), None where it has none."""
    found = budget_columns(start, end, report.get("within", ""))
    for line in report["lines"]:
        line.update(found.get((line["unit_path"], line["flavor_key"]), dict.fromkeys(BUDGET_COLUMNS)))
    report["has_budgets"] = any(line["budget_h"] is not None for line in report["lines"])
    return report
