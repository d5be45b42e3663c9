"""The accounting pillar's parts of the portal's pages (quotas.portal.panels), registered in
``AccountingConfig.ready``: on the unit page its use over time, its fair-share on each Slurm cluster
and its GPU-hour budgets; on the organisation page the live findings on the units a lead leads; on a
pending change request's page how its units used the GPUs it changes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.db.models import Count, Q
from django.http import HttpRequest

from quotas.access import led_paths, may_read_costs
from quotas.models import ChangeRequest, Cluster, ClusterKind, OrgUnit, Quota, ResourceFlavor
from quotas.policy.durations import format_duration
from quotas.portal.panels import register_home_panel, register_request_panel, register_unit_panel
from quotas.selectors import subtree


def usage_panel(request: HttpRequest, unit: OrgUnit, base: Mapping[str, Any]) -> dict[str, Any]:
    """The unit's usage chart (the rollups) per day, week or month, its guarantee line from today's
    quota, and where the usage comes from."""
    from accounting.charts import usage_chart
    from accounting.selectors.usage import unit_usage_days, usage_hours

    if not may_read_costs(request.user, unit.path):  # ALLOT_SHOWBACK_VISIBILITY=leads: its leads and above
        return {"usage": None, "usage_hidden": True}
    chart_rows = base["chart_rows"]
    period = request.GET.get("usage", "day")
    if period not in ("day", "week", "month"):
        period = "day"
    days = unit_usage_days(unit.path, period=period)
    guarantee = sum(g for _, g, _, _ in chart_rows)
    days = [replace(d, guarantee=guarantee * d.hours) for d in days]
    ceiling = sum(c for _, _, c, _ in chart_rows)
    usage = usage_chart(days, ceiling, period=period)
    source = ""
    if usage:
        found = usage_hours(within=unit.path).values_list("flavor__cluster__description", flat=True).distinct()[:3]
        source = "; ".join(d for d in found if d)
    shared = any(q.flavor.sharing != "whole" for q in base.get("quotas") or ())
    return {
        "usage": usage, "usage_days": len(days), "usage_period": period, "usage_source": source,
        "usage_ceiling": ceiling, "usage_shared": shared,
    }  # fmt: skip


def fairshare_panel(request: HttpRequest, unit: OrgUnit, base: Mapping[str, Any]) -> dict[str, Any]:
    """Per Slurm cluster the unit has quota on: its account's fair-share line and its members'."""
    from accounting.services.fairshare import slurm_fairshare

    clusters: set[Cluster] = {q.flavor.cluster for q in base["quotas"] if q.flavor.cluster.kind == ClusterKind.SLURM}
    found = []
    account = (unit.slurm_account or unit.slug).lower()
    for cluster in sorted(clusters, key=lambda c: c.name):
        if not cluster.enabled or not cluster.connection_ref:
            continue
        try:
            report = slurm_fairshare(cluster=cluster)
        except ValueError:
            continue
        lines = [line for line in report.lines if line.account == account]
        if lines:
            found.append(
                {"cluster": cluster.name, "lines": lines, "jobs": report.jobs,
                 "half_life": format_duration(report.half_life_s)}
            )  # fmt: skip
    return {"fairshare": found}


def budgets_panel(request: HttpRequest, unit: OrgUnit, base: Mapping[str, Any]) -> dict[str, Any]:
    from accounting.portal.budgets import budget_panel

    return {"budgets": budget_panel(unit)}


def findings_count(request: HttpRequest, led: list[str]) -> dict[str, Any]:
    """Live findings on the units a lead leads (and below), per state: the home page's inbox count."""
    from accounting.models import Finding

    if not led:
        return {"findings": {}}
    match = Q(pk__in=[])
    for path in led:
        match |= subtree("unit__path", path)
    rows = Finding.objects.filter(match, state__in=["open", "acknowledged"]).values("state").annotate(n=Count("id"))
    return {"findings": {r["state"]: r["n"] for r in rows}}


def request_usage(request: HttpRequest, change_request: ChangeRequest, items: list[tuple[int, int]]) -> dict[str, Any]:
    """Per GPU quota the request changes: over the 30 days up to its latest usage, the most GPUs the
    unit (and below) held in an hour, the median hour, the share of hours it held its whole current
    guarantee and the device-hours it queued — for the units whose usage the reader may see
    (ALLOT_SHOWBACK_VISIBILITY); the others are named as hidden."""
    from accounting.policy.findings import percentile
    from accounting.selectors.usage import held_by_hour_many

    if not items:
        return {}
    units = {u.pk: u for u in OrgUnit.objects.filter(pk__in={u for u, _ in items})}
    flavors = {f.pk: f"{f.cluster.name}/{f.name}" for f in ResourceFlavor.objects.select_related("cluster")}
    current = {
        (q.unit_id, q.flavor_id): q.guarantee
        for q in Quota.objects.filter(unit_id__in=units, resource="nvidia.com/gpu")
    }
    led = led_paths(request.user)
    rows, hidden = [], []
    ordered = sorted(set(items), key=lambda k: (units[k[0]].path, flavors.get(k[1], "")))
    readable = [(u, f) for u, f in ordered if may_read_costs(request.user, units[u].path, led)]
    found = held_by_hour_many([(units[u].path, f) for u, f in readable])  # two queries, however many items
    for unit_id, flavor_id in ordered:
        unit = units[unit_id]
        if (unit_id, flavor_id) not in readable:
            hidden.append(unit.path)
            continue
        start, end, hours = found[(unit.path, flavor_id)]
        held = [h for h, _ in hours]
        guarantee = current.get((unit_id, flavor_id), 0)
        full = sum(1 for h in held if guarantee and h >= guarantee - 0.5)
        rows.append(
            {
                "unit": unit.path, "flavor": flavors.get(flavor_id, "?"), "hours": len(hours), "start": start,
                "end": end, "peak": max(held, default=0.0), "median": percentile(held, 0.5),
                "p95": percentile(held, 0.95), "guarantee": guarantee,
                "full_share": round(100 * full / len(held)) if held and guarantee else None,
                "queued_h": sum(q for _, q in hours),
            }
        )  # fmt: skip
    return {"request_usage": rows, "request_usage_hidden": sorted(set(hidden))}


def register() -> None:
    register_unit_panel("accounting.usage", usage_panel)
    register_unit_panel("accounting.fairshare", fairshare_panel)
    register_unit_panel("accounting.budgets", budgets_panel)
    register_home_panel("accounting.findings", findings_count)
    register_request_panel("accounting.usage", request_usage)
    from accounting.portal import waiting

    waiting.register()
