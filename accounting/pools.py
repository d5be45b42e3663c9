"""Reads for the pool table (accounting.policy.pools): per flavor and period, fleet-wide or for one
unit's subtree, from the hourly rollups in two grouped queries (hours with telemetry per flavor; the
sums per flavor). Device-hours, not costs: readable like usage."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum

from accounting.models import UsageHour
from accounting.policy.pools import PoolHours, fleet_hours, pool_line, pool_table
from accounting.selectors.showback import showback_period
from accounting.selectors.usage import telemetry_hours
from quotas.models import OrgUnit, Quota, ResourceFlavor
from quotas.selectors import subtree


def pool_hours(start: datetime, end: datetime, within: str = "") -> list[PoolHours]:
    """Each flavor with telemetry in [start, end): its hours, capacity and sums (of ``within``'s
    subtree when given, its capacity then the subtree's guarantee)."""
    period = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    covered = telemetry_hours(start, end)
    rows = period.filter(subtree("unit__path", within)) if within else period
    sums = {
        r["flavor_id"]: r
        for r in rows.values("flavor_id").annotate(
            a=Sum("allocated"), p=Sum("pending"), act=Sum("active"), prod=Sum("productive"),
            measured=Sum("allocated", filter=Q(active__isnull=False)),
            est=Count("id", filter=Q(productive_estimated=True)),
        )
    }  # fmt: skip
    flavors = {f.pk: f for f in ResourceFlavor.objects.select_related("cluster").filter(pk__in=covered)}
    if within:
        root = OrgUnit.objects.filter(path=within).first()
        if root is None:
            raise ValueError(f"within: no unit {within!r}: give a unit path such as acme/research")
        devices = dict(
            Quota.objects.filter(unit=root, resource="nvidia.com/gpu", flavor_id__in=covered).values_list(
                "flavor_id", "guarantee"
            )
        )
    else:
        devices = {pk: f.physical_devices for pk, f in flavors.items()}
    found = []
    for pk, flavor in flavors.items():
        r: dict[str, Any] = dict(sums.get(pk, {}))
        if within and not devices.get(pk) and not r:
            continue  # the subtree neither holds nor uses this pool
        found.append(
            PoolHours(
                flavor.key,
                float(devices.get(pk) or 0),
                covered[pk],
                r.get("a") or 0.0,
                r.get("p") or 0.0,
                r.get("measured") or 0.0,
                r.get("act") or 0.0,
                r.get("prod"),
                bool(r.get("est")),
                flavor.device_memory_gb or 0,
            )
        )
    return found


def pool_report(month: str, within: str = "") -> dict[str, Any]:
    """The pool table of ``month`` (YYYY-MM) beside the month before, and the fleet's row; ValueError
    naming a malformed month."""
    period = showback_period(month)
    before_start = showback_period((period.start - timedelta(days=1)).strftime("%Y-%m")).start
    now = pool_hours(period.start, period.end, within)
    then = {h.flavor: h for h in pool_hours(before_start, period.start, within)}
    lines = pool_table(now, then)
    fleet_now, fleet_then = fleet_hours(now), fleet_hours(then.values())
    fleet = pool_line(fleet_now, fleet_then) if fleet_now else None
    fragmented = _fragmentation(period.start, period.end)
    pools = [line.as_dict() for line in lines]
    for pool in pools:
        pool["fragmentation"] = fragmented.get(pool["flavor"])
    return {
        "month": month,
        "before": before_start.strftime("%Y-%m"),
        "within": within,
        "pools": pools,
        "fleet": fleet.as_dict() if fleet else None,
    }


def _largest_gangs(placeable: dict[str, int]) -> str:
    """``8 × 5, 1 × 70``: per per-node size of the waiting work, the most members that could start."""
    return ", ".join(f"{size} × {n}" for size, n in sorted(placeable.items(), key=lambda kv: -int(kv[0])))


def _fragmentation(start: datetime, end: datetime) -> dict[str, dict[str, Any]]:
    """Per flavor key: the latest fragmentation sample in [start, end) and the period's mean index
    over the hours something waited (accounting.policy.fragmentation)."""
    from django.db.models import Avg

    from accounting.models import FragmentationSample

    rows = FragmentationSample.objects.filter(at__gte=start, at__lt=end)
    waited = rows.filter(pending_gpus__gt=0).values("flavor_id").annotate(m=Avg("index"))
    means = dict(waited.values_list("flavor_id", "m"))
    latest: dict[str, dict[str, Any]] = {}
    for r in rows.select_related("flavor__cluster").order_by("-at"):  # a flavor's hours: a few hundred a month
        key = r.flavor.key
        if key in latest:
            continue
        latest[key] = {
            "at": r.at.isoformat(), "free": r.free, "usable": r.usable, "index": r.index,
            "largest_block": r.largest_block, "whole_free_nodes": r.whole_free_nodes, "pending_gpus": r.pending_gpus,
            "waiting": r.waiting[:3], "placeable": _largest_gangs(r.placeable),
            "mean_index_while_waiting": None if r.flavor_id not in means else round(means[r.flavor_id], 3),
        }  # fmt: skip
    return latest
