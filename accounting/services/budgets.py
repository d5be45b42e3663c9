"""Budget spend from the hourly rollups: evaluated after each rollup, read by pages, findings and reviews.

Spend is allocated device-hours of the budget's unit and everything under it, on its flavor, from
``UsageHour``: inside the guarantee whole, borrowed at :data:`quotas.policy.budgets.BORROWED_FACTOR`
(the Slurm burst QOS's ``UsageFactor``, so both schedulers spend alike). The rollups are per unit and
flavor, not per tier: a budget counts all of its units' hours on the flavor; its tiers say what its
action stops. One grouped query a window (this period, the previous one for carry-over, the trailing
hours behind the burn rate: spend over the hours with telemetry in them); the sums are carried up
the tree in one pass.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from accounting.models import UsageHour
from accounting.selectors.usage import telemetry_hours
from quotas.access import within_any
from quotas.models import Budget, BudgetSpend, ClusterKind, OrgUnit
from quotas.policy import budgets as bud
from quotas.policy.budget_effects import subtree_ids
from quotas.selectors import BUDGET_FIELDS, budget_core, subtree
from quotas.services.budget_spend import SpendRecord, budget_spend_record
from quotas.services.enforce import enforce_clusters_soon

Sums = dict[tuple[int, int], tuple[float, float]]
"""(unit id, flavor id) → (inside-guarantee, borrowed) device-hours."""


def _sums(start: datetime, end: datetime, flavors: Iterable[int]) -> Sums:
    rows = (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, flavor_id__in=list(flavors))
        .values("unit_id", "flavor_id")
        .annotate(w=Sum("within"), b=Sum("borrowed"))
    )
    return {(r["unit_id"], r["flavor_id"]): (r["w"] or 0.0, r["b"] or 0.0) for r in rows}


def _charge(within: float, borrowed: float) -> float:
    return within + bud.BORROWED_FACTOR * borrowed


@dataclass(frozen=True)
class _Row:
    id: int
    unit_id: int
    unit_path: str
    flavor_id: int
    cluster_id: int
    slurm: bool
    version: int
    budget: bud.Budget

    @property
    def slurm_minutes(self) -> bool:
        """Compiled to Slurm QOS minutes that follow the spend (quotas.policy.budgets.slurm_minutes)."""
        return self.slurm and self.budget.action in (bud.BudgetAction.HOLD, bud.BudgetAction.DENY)


def _rows(scope: Q | None = None) -> list[_Row]:
    """Budgets of active units (within ``scope``), in path order: one query of plain values."""
    rows = Budget.objects.filter(unit__archived_at__isnull=True)
    if scope is not None:
        rows = rows.filter(scope)
    names = ("id", "unit_id", "unit__path", "flavor_id", "flavor__cluster_id", "flavor__cluster__kind",
             "flavor__cluster__name", "flavor__name", "version", *BUDGET_FIELDS)  # fmt: skip
    return [
        _Row(
            b["id"],
            b["unit_id"],
            b["unit__path"],
            b["flavor_id"],
            b["flavor__cluster_id"],
            b["flavor__cluster__kind"] == ClusterKind.SLURM,
            b["version"],
            budget_core(b["unit_id"], f"{b['flavor__cluster__name']}/{b['flavor__name']}", b),
        )
        for b in rows.order_by("unit__path", "flavor__cluster__name", "flavor__name").values(*names)
    ]


def _up_the_tree(
    sums: Sums, parents: Mapping[int, int | None], wanted: set[tuple[int, int]]
) -> dict[tuple[int, int], float]:
    """Each wanted (unit, flavor)'s charged spend: its own rows and every descendant's."""
    total: dict[tuple[int, int], float] = defaultdict(float)
    for (uid, fid), (within, borrowed) in sums.items():
        charge = _charge(within, borrowed)
        node: int | None = uid
        seen = 0
        while node is not None and seen < 64:
            if (node, fid) in wanted:
                total[(node, fid)] += charge
            node = parents.get(node)
            seen += 1
    return total


def budgets_evaluate(*, now: datetime | None = None) -> dict[str, Any]:
    """Measure every budget's current period and record it (quotas.services.budget_spend.budget_spend_record:
    audited when a budget runs out or is released). Returns counts."""
    now = now or timezone.now()
    rows = [r for r in _rows() if r.budget.starts is None or r.budget.starts <= now.date()]
    if not rows:
        return {"budgets": 0}
    parents = dict(OrgUnit.objects.filter(archived_at__isnull=True).values_list("id", "parent_id"))
    flavors = {r.flavor_id for r in rows}
    wanted = {(r.unit_id, r.flavor_id) for r in rows}
    trailing_h = settings.ALLOT_BUDGET_TRAILING_HOURS
    trailing = _up_the_tree(_sums(now - timedelta(hours=trailing_h), now, flavors), parents, wanted)
    covered = telemetry_hours(now - timedelta(hours=trailing_h), now, flavors)
    by_period: dict[bud.Period, tuple[datetime, datetime]] = {
        p: bud.period_bounds(p, now) for p in {r.budget.period for r in rows}
    }
    current = {p: _sums(start, now, flavors) for p, (start, _) in by_period.items()}
    spent = {p: _up_the_tree(s, parents, wanted) for p, s in current.items()}
    previous: dict[bud.Period, dict[tuple[int, int], float]] = {}
    for p, (start, _) in by_period.items():
        if any(r.budget.carry_over_cap > 0 and r.budget.period is p for r in rows):
            before, _ = bud.period_bounds(p, start - timedelta(seconds=1))
            previous[p] = _up_the_tree(_sums(before, start, flavors), parents, wanted)
    resets = dict(
        BudgetSpend.objects.filter(
            budget_id__in=[r.id for r in rows], period_end__gt=now, period_start__lte=now
        ).values_list("budget_id", "reset_at")
    )
    children: defaultdict[int | None, list[int]] = defaultdict(list)
    for uid, parent in parents.items():
        children[parent].append(uid)
    since: dict[datetime, Sums] = {by_period[p][0]: sums for p, sums in current.items()}
    """Per unit, what Slurm's QOS counted since their usage was reset: the rollup hours from the first
    whole hour after the reset (one query per distinct hour: budgets reset by the same sync share it)."""
    records = []
    for row in rows:
        start, end = by_period[row.budget.period]
        key = (row.unit_id, row.flavor_id)
        carried = 0.0
        if row.budget.carry_over_cap > 0:
            began = row.budget.starts is None or row.budget.starts < start.date()
            carried = bud.carried_over(row.budget, previous[row.budget.period].get(key, 0.0) if began else None)
        allowance = row.budget.device_hours + carried
        used = spent[row.budget.period].get(key, 0.0)
        by_unit: dict[str, list[float]] = {}
        reset_at = resets.get(row.id)
        if row.slurm_minutes and reset_at:
            hour = max(start, _next_hour(reset_at))
            if hour not in since:
                since[hour] = _sums(hour, now, flavors)
            for uid in subtree_ids(children, row.unit_id):
                within, borrowed = since[hour].get((uid, row.flavor_id), (0.0, 0.0))
                if within or borrowed:
                    by_unit[str(uid)] = [round(within, 4), round(bud.BORROWED_FACTOR * borrowed, 4)]
        rate = trailing.get(key, 0.0) * 24 / max(1, covered.get(row.flavor_id, trailing_h))
        status = bud.budget_status(row.budget, allowance=allowance, spent=used, rate_per_day=rate, now=now)
        records.append(
            SpendRecord(
                row.id,
                start,
                end,
                allowance,
                carried,
                round(used, 4),
                round(rate, 4),
                by_unit,
                status.level is not bud.BudgetLevel.OK,
            )
        )
    counts = budget_spend_record(records=records, now=now)
    # their QOS minutes follow the spend of the other QOS of their subtree: the clusters sync again
    enforce_clusters_soon({r.cluster_id for r in rows if r.slurm_minutes})
    return {"budgets": len(records), **counts}


def _next_hour(at: datetime) -> datetime:
    floor = at.replace(minute=0, second=0, microsecond=0)
    return floor if floor == at else floor + timedelta(hours=1)


# ------------------------------------------------------------------------------------------ reads


@dataclass(frozen=True)
class BudgetView:
    """A budget as pages, the API, findings and reviews show it."""

    id: int
    unit_id: int
    unit_path: str
    flavor_id: int
    flavor: str
    budget: bud.Budget
    status: bud.BudgetStatus
    carried: float
    held_seconds: int
    exhausted_at: datetime | None
    evaluated_at: datetime | None
    version: int

    def as_dict(self) -> dict[str, Any]:
        s = self.status
        return {
            "id": self.id,
            "unit": self.unit_id,
            "unit_path": self.unit_path,
            "flavor": self.flavor_id,
            "flavor_key": self.flavor,
            "period": self.budget.period.value,
            "device_hours": self.budget.device_hours,
            "action": self.budget.action.value,
            "tiers": list(self.budget.tiers),
            "warn_percent": self.budget.warn_percent,
            "carry_over_cap": self.budget.carry_over_cap,
            "oversubscription": self.budget.oversubscription,
            "starts_on": self.budget.starts.isoformat() if self.budget.starts else None,
            "period_start": s.period_start.isoformat(),
            "period_end": s.period_end.isoformat(),
            "allowance": round(s.allowance, 1),
            "carried": round(self.carried, 1),
            "spent": round(s.spent, 1),
            "remaining": round(s.remaining, 1),
            "percent": s.percent,
            "burn_rate_per_day": round(s.rate_per_day, 1),
            "level": s.level.value,
            "forecast_exhaustion": s.exhausts_at.isoformat() if s.exhausts_at else None,
            "held_seconds": self.held_seconds,
            "exhausted_at": self.exhausted_at.isoformat() if self.exhausted_at else None,
            "evaluated_at": self.evaluated_at.isoformat() if self.evaluated_at else None,
            "version": self.version,
        }


def budget_views(
    *, paths: Iterable[str] | None = None, now: datetime | None = None, unit_ids: Iterable[int] | None = None
) -> list[BudgetView]:
    """Budgets (of the units under ``paths`` when given) with their evaluated current period (2 queries)."""
    now = now or timezone.now()
    scope = Q()
    if paths is not None:
        scope &= within_any("unit__path", paths)
    if unit_ids is not None:
        scope &= Q(unit_id__in=list(unit_ids))
    rows = _rows(scope)
    spends = {
        s.budget_id: s
        for s in BudgetSpend.objects.filter(
            budget_id__in=[r.id for r in rows], period_start__lte=now, period_end__gt=now
        )
    }
    views = []
    for row in rows:
        spend = spends.get(row.id)
        status = bud.budget_status(
            row.budget,
            allowance=spend.allowance if spend else float(row.budget.device_hours),
            spent=spend.spent if spend else 0.0,
            rate_per_day=spend.rate_per_day if spend else 0.0,
            now=now,
        )
        views.append(
            BudgetView(
                row.id,
                row.unit_id,
                row.unit_path,
                row.flavor_id,
                row.budget.flavor,
                row.budget,
                status,
                spend.carried if spend else 0.0,
                bud.held_seconds(spend.exhausted_at, spend.released_at, spend.period_end, now) if spend else 0,
                spend.exhausted_at if spend else None,
                spend.evaluated_at if spend else None,
                row.version,
            )
        )
    return views


def daily_spend(view: BudgetView) -> dict[date, float]:
    """Charged device-hours per UTC day of the budget's current period (one grouped query)."""
    start, end = view.status.period_start, view.status.period_end
    rows = (
        UsageHour.objects.filter(subtree("unit__path", view.unit_path), flavor_id=view.flavor_id)
        .filter(hour__gte=start, hour__lt=end)
        .annotate(day=TruncDate("hour"))
        .values("day")
        .annotate(w=Sum("within"), b=Sum("borrowed"))
    )
    return {r["day"]: _charge(r["w"] or 0.0, r["b"] or 0.0) for r in rows}


def budget_findings_detect(*, now: datetime | None = None) -> dict[str, Any]:
    """After each evaluation: open (and mail) or resolve the budget findings — warn threshold passed,
    forecast exhaustion before the period ends, spent (accounting.policy.budget_findings)."""
    from accounting.policy.budget_findings import BudgetState, budget_findings
    from accounting.policy.findings import BUDGET_KINDS
    from accounting.services.finding_records import findings_reconcile

    now = now or timezone.now()
    states = [BudgetState(v.id, v.unit_id, v.unit_path, v.flavor_id, v.budget, v.status) for v in budget_views(now=now)]
    return findings_reconcile(budget_findings(states, now), now, now, BUDGET_KINDS).as_dict()
