"""The tables of the monthly governance review of an organisation or department (``review_data``).

Tables, each with stable column names (``COLUMNS``; docs/concepts/review.md lists them):

* ``units`` — per unit and flavor: the quota, the month's device-hours (allocated, within, borrowed,
  lent, pending, active, productive and whether it is estimated), telemetry coverage, cost, idle cost
  and lent credit, fairness (wait p95, slowdown p95), the share of minutes at ≥ 90 % of the guarantee,
  guarantee shortfall and did-not-fit minutes and the queue and idle guarantee the plan would have
  left (the backtest), findings open during the month and resolved in it, the verdict, last month's
  allocated hours and cost where there is a last month, and contract compliance: reclaims of its
  guarantee within and beyond the contract's promise;
* ``recommendations`` — one per unit and flavor: the governance plan's item
  (``accounting.services.plan``: the same verdict the findings, the portal and the API give), with its
  evidence, the items it needs, and the change request it became;
* ``quota_changes`` — every quota change of the month from the audit trail: when, who, why, before → after;
* ``findings`` — the findings open at any time in the month (opened earlier and still open included);
* ``coverage`` — hours with and without telemetry per flavor, and where usage came from;
* ``pools`` — per flavor (pool): capacity, allocated, active share of allocated, productive, waiting
  demand and idle hours, with the change since the month before (accounting.policy.pools; an
  organisation's review: the fleet, a department's: its subtree against its guarantee);
* ``budgets`` — each GPU-hour budget of the subtree (accounting.services.budget_reports): its period,
  allowance, spend to the month's end, what is left, the day it ran out and the days it was held, the
  forecast while its period runs; with no budget in the subtree, a replay of one at 80 % of each
  unit's guarantee-hours (``basis: replay``), to show what budgets would have done.

The summary leads with the plan: what it changes, what it would have done to the month (backtest) and
what it cannot fix; it names the days without telemetry and the fleet's cost beside the units'.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone

from accounting.models import Finding, SourceRun, UsageHour
from accounting.pools import pool_report
from accounting.reclaims import reclaims
from accounting.selectors.fairness import fairness_report
from accounting.selectors.showback import showback_period, showback_report, unit_flavor_usage
from accounting.services.budget_reports import budget_month
from accounting.services.plan import governance_plan
from accounting.services.review_plan import fleet_cost, gap_days, plan_summary, recommendation_row
from quotas.history import quotas_as_of
from quotas.models import AuditEvent, OrgUnit
from quotas.policy.snapshot import Quota
from quotas.selectors import subtree

GPU = "nvidia.com/gpu"


COLUMNS: dict[str, list[str]] = {
    "units": [
        "unit_path",
        "flavor",
        "guarantee",
        "burst",
        "lendable",
        "allocated_h",
        "within_h",
        "borrowed_h",
        "lent_h",
        "pending_h",
        "active_h",
        "productive_h",
        "productive_estimated",
        "telemetry_hours",
        "hours_in_month",
        "cost",
        "idle_cost",
        "lent_credit",
        "wait_p95_s",
        "slowdown_p95",
        "full_share",
        "shortfall_minutes",
        "did_not_fit_minutes",
        "queued_h_plan",
        "idle_guarantee_h_plan",
        "findings_opened",
        "findings_resolved",
        "verdict",
        "last_month_allocated_h",
        "last_month_cost",
    ],
    "recommendations": [
        "unit_path",
        "flavor",
        "verdict",
        "evidence",
        "guarantee_to",
        "burst_to",
        "lendable_to",
        "plan_item",
        "needs_items",
        "change_request",
    ],
    "quota_changes": ["at", "actor", "unit_path", "what", "reason", "before", "after"],
    "findings": ["id", "kind", "unit_path", "flavor", "state", "opened_at", "closed_at", "cost", "summary"],
    "coverage": ["flavor", "hours_in_month", "hours_with_telemetry", "gap_hours", "sources"],
    "pools": [
        "flavor",
        "memory_gb",
        "capacity_h",
        "allocated_h",
        "allocated_pct",
        "active_pct",
        "productive_pct",
        "pending_h",
        "idle_h",
        "allocated_pct_change_pp",
        "active_pct_change_pp",
    ],
    "budgets": [
        "unit_path",
        "flavor",
        "basis",
        "period",
        "action",
        "allowance_h",
        "spent_h",
        "remaining_h",
        "percent",
        "ran_out_on",
        "held_days",
        "forecast_exhaustion",
    ],
}


@dataclass
class ReviewData:
    unit_path: str
    month: str
    generated_at: datetime
    tables: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]


def month_bounds(month: str) -> tuple[datetime, datetime]:
    period = showback_period(month)
    return period.start, period.end


def _previous(month: str) -> str:
    start, _ = month_bounds(month)
    return (start - timedelta(days=1)).strftime("%Y-%m")


def review_data(unit: OrgUnit, month: str) -> ReviewData:
    """Everything the review says for ``unit`` and below in ``month`` (YYYY-MM, UTC)."""
    start, end = month_bounds(month)
    hours_in_month = int((end - start).total_seconds() // 3600)
    rows = UsageHour.objects.filter(subtree("unit__path", unit.path), hour__gte=start, hour__lt=end)
    usage = unit_flavor_usage(rows)
    totals, units, flavors = usage.totals, usage.units, usage.flavors
    then = quotas_as_of(end)  # the month's terms, not today's: approving a change later never rewrites it
    quotas = {(u, f): Quota(*then[(u, f, GPU)]) for u, f in totals if (u, f, GPU) in then}
    show = {
        (line["unit_path"], line["flavor_key"]): line
        for line in showback_report(showback_period(month), within=unit.path, rollup=False)["lines"]
    }
    last = {
        (line["unit_path"], line["flavor_key"]): line
        for line in showback_report(showback_period(_previous(month)), within=unit.path, rollup=False)["lines"]
    }
    last_allocated = {
        (r["unit__path"], r["flavor_id"]): r["a"]
        for r in UsageHour.objects.filter(
            subtree("unit__path", unit.path), hour__gte=month_bounds(_previous(month))[0], hour__lt=start
        )
        .values("unit__path", "flavor_id")
        .annotate(a=Sum("allocated"))
    }
    fair = {u["unit_path"]: u for u in fairness_report(showback_period(month), within=unit.path)["units"]}
    found = Finding.objects.filter(subtree("unit__path", unit.path)).select_related("unit", "flavor__cluster")
    overlapping = found.filter(
        Q(window_start__lt=end, window_end__gt=start)
        | Q(opened_at__lt=end) & (Q(closed_at__isnull=True) | Q(closed_at__gte=start))
    )
    opened = dict(overlapping.values("unit_id").annotate(n=Count("id")).values_list("unit_id", "n"))
    closed = dict(
        found.filter(closed_at__gte=start, closed_at__lt=end, state="resolved")
        .values("unit_id")
        .annotate(n=Count("id"))
        .values_list("unit_id", "n")
    )
    kept: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
    for reclaim in reclaims(start, end, {}):
        late = (reclaim.admitted - reclaim.submitted).total_seconds() > reclaim.promised_s
        kept[(reclaim.lender, reclaim.flavor)][1 if late else 0] += 1
    report = governance_plan(unit, month)
    table_units: list[dict[str, Any]] = []
    table_recs: list[dict[str, Any]] = []
    rec_of_item: dict[int, int] = {}
    for (uid, fid), r in sorted(totals.items(), key=lambda kv: (units[kv[0][0]].path, kv[0][1])):
        u, f = units[uid], flavors[fid]
        q = quotas.get((uid, fid))
        key = f"{f.cluster.name}/{f.name}"
        verdict = report.verdict(uid, key)
        today, planned = report.today.get((uid, key)), report.planned.get((uid, key))
        money = show.get((u.path, key), {})
        before = last.get((u.path, key), {})
        fairness = fair.get(u.path, {})
        table_units.append(
            {
                "unit_path": u.path,
                "flavor": key,
                "guarantee": q.guarantee if q else 0,
                "burst": q.burst if q else 0,
                "lendable": q.lendable if q else 0,
                "allocated_h": round(r["a"] or 0, 2),
                "within_h": round(r["w"] or 0, 2),
                "borrowed_h": round(r["b"] or 0, 2),
                "lent_h": round(r["lent_h"] or 0, 2),
                "pending_h": round(r["p"] or 0, 2),
                "active_h": None if r["act"] is None else round(r["act"], 2),
                "productive_h": None if r["prod"] is None else round(r["prod"], 2),
                "productive_estimated": bool(r["est"]),
                "telemetry_hours": r["hours"],
                "hours_in_month": hours_in_month,
                "cost": money.get("cost"),
                "idle_cost": money.get("idle_cost"),
                "lent_credit": money.get("lent_credit"),
                "wait_p95_s": fairness.get("wait_p95_s"),
                "slowdown_p95": fairness.get("slowdown_p95"),
                "full_share": round(r["full"] / r["mins"], 4) if r.get("mins") and (q and q.guarantee) else None,
                "shortfall_minutes": None if today is None else round(today.shortfall_minutes),
                "did_not_fit_minutes": None if today is None else round(today.did_not_fit_minutes),
                "queued_h_plan": None if planned is None else round(planned.queued_h, 1),
                "idle_guarantee_h_plan": None if planned is None else round(planned.idle_guarantee_h, 1),
                "findings_opened": opened.get(uid, 0),
                "findings_resolved": closed.get(uid, 0),
                "verdict": verdict["verdict"],
                "last_month_allocated_h": None
                if (u.path, fid) not in last_allocated
                else round(last_allocated[(u.path, fid)], 2),
                "last_month_cost": before.get("cost"),
                "reclaims_within_promise": kept[(uid, fid)][0] if (uid, fid) in kept else 0,
                "reclaims_beyond_promise": kept[(uid, fid)][1] if (uid, fid) in kept else 0,
            }
        )
        if (q and q.guarantee > 0) or verdict["item"] is not None:
            if verdict["item"] is not None:
                rec_of_item[verdict["item"]] = len(table_recs)
            table_recs.append(recommendation_row(report, u.path, key, fid, verdict))
    for row in table_recs:  # the items an item needs, as the review numbers them
        row["needs"] = [rec_of_item[i] for i in row.pop("needs_plan", []) if i in rec_of_item]
        # named, not numbered: a position in a list the reader never sees numbered meant nothing
        row["needs_items"] = "; ".join(f"{table_recs[i]['unit_path']} {table_recs[i]['flavor']}" for i in row["needs"])
    changes = [
        {
            "at": e.at.isoformat(),
            "actor": e.actor_name,
            "unit_path": e.unit_path,
            "what": e.object_repr,
            "reason": e.reason,
            "before": json.dumps(e.before, sort_keys=True),
            "after": json.dumps(e.after, sort_keys=True),
        }
        for e in AuditEvent.objects.filter(action="quota_set", at__gte=start, at__lt=end)
        .filter(Q(unit_path=unit.path) | Q(unit_path__startswith=f"{unit.path}/"))
        .order_by("at")
    ]
    findings = [
        {
            "id": x.pk,
            "kind": x.kind,
            "unit_path": x.unit.path if x.unit else "",
            "flavor": x.flavor.key if x.flavor else "",
            "state": x.state,
            "opened_at": x.opened_at.isoformat(),
            "closed_at": x.closed_at.isoformat() if x.closed_at else None,
            "cost": None if x.cost is None else f"{x.cost:.2f}",
            "summary": x.summary,
        }
        for x in overlapping.order_by("opened_at", "id")
    ]
    per_flavor = rows.values("flavor_id", "hour").annotate(m=Sum("minutes")).values_list("flavor_id", "hour")
    covered: dict[int, set[datetime]] = defaultdict(set)
    for fid, hour in per_flavor.filter(m__gt=0):
        covered[fid].add(hour)
    sources = sorted(set(SourceRun.objects.filter(cluster__flavors__in=flavors).values_list("source", flat=True)))
    coverage: list[dict[str, Any]] = [
        {
            "flavor": f"{f.cluster.name}/{f.name}",
            "hours_in_month": hours_in_month,
            "hours_with_telemetry": len(covered[fid]),
            "gap_hours": hours_in_month - len(covered[fid]),
            "sources": ", ".join(sources) or "replay",
        }
        for fid, f in sorted(flavors.items(), key=lambda kv: kv[1].name)
    ]
    verdicts: dict[str, int] = defaultdict(int)
    for rec_row in table_recs:
        verdicts[rec_row["verdict"]] += 1
    costs = [Decimal(x["cost"]) for x in table_units if x["cost"] is not None]
    idle = [Decimal(x["idle_cost"]) for x in table_units if x["idle_cost"] is not None]
    summary = {
        "units": len({x["unit_path"] for x in table_units}),
        "allocated_h": round(sum(x["allocated_h"] for x in table_units), 1),
        "guarantee_h": round(sum(t["g"] or 0 for t in totals.values()), 1),
        "cost": f"{sum(costs, Decimal(0)):.2f}" if costs else None,
        "idle_cost": f"{sum(idle, Decimal(0)):.2f}" if idle else None,
        "verdicts": dict(verdicts),
        "gap_hours": sum(int(c["gap_hours"]) for c in coverage),
        "quota_changes": len(changes),
        "findings": len(findings),
        "has_last_month": any(x["last_month_allocated_h"] is not None for x in table_units),
        "gap_days": gap_days(covered, flavors, start, end),
        "fleet_cost": fleet_cost(flavors, hours_in_month),
        **plan_summary(report),
    }
    pools = pool_report(month, "" if unit.parent_id is None else unit.path)
    summary["pools"] = pools["pools"] + ([pools["fleet"]] if pools["fleet"] else [])
    budgets = budget_month(unit, start, end)
    ran_out = [b for b in budgets if b["ran_out_on"]]
    summary["budgets"] = {
        "basis": budgets[0]["basis"] if budgets else None,
        "count": len(budgets),
        "ran_out": [
            {k: b[k] for k in ("unit_path", "flavor", "ran_out_on", "held_days", "allowance_h", "spent_h")}
            for b in sorted(ran_out, key=lambda b: (b["ran_out_on"], b["unit_path"]))
        ],
    }
    tables = {
        "pools": [{k: v for k, v in line.items() if k != "before"} for line in summary["pools"]],
        "budgets": budgets,
        "units": table_units,
        "recommendations": table_recs,
        "quota_changes": changes,
        "findings": findings,
        "coverage": coverage,
    }
    return ReviewData(unit.path, month, timezone.now(), tables, summary)
