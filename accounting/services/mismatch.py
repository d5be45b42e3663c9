"""Reads for the policy–infrastructure mismatch findings (accounting.policy.mismatch): each pool's
hours (allocated and waiting per flavor and hour, one grouped query) and the workloads' measured
memory peaks (``MemoryHour``) over the detectors' window, for clusters with more than one pool."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Count, Sum

from accounting.models import MemoryHour, UsageHour
from accounting.policy.findings import Found, Thresholds
from accounting.policy.mismatch import Pool, PoolHour, WorkloadHour, over_specified, stranded_pools
from quotas.models import ResourceFlavor


def mismatch_found(start: datetime, end: datetime, th: Thresholds) -> list[Found]:
    flavors = list(ResourceFlavor.objects.select_related("cluster"))
    per_cluster: dict[int, int] = defaultdict(int)
    for f in flavors:
        per_cluster[f.cluster_id] += 1
    pools = {
        f.pk: Pool(f.pk, f.key, f.cluster_id, f.device_memory_gb, f.physical_devices)
        for f in flavors
        if per_cluster[f.cluster_id] > 1 and f.device_memory_gb
    }
    if not pools:
        return []
    rows = (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, flavor_id__in=list(pools))
        .values("flavor_id", "hour")
        .annotate(a=Sum("allocated"), p=Sum("pending"), n=Count("id"))
    )
    pool_hours = [PoolHour(r["flavor_id"], r["hour"], r["a"] or 0.0, r["p"] or 0.0) for r in rows]
    idle = {(ph.flavor, ph.hour): max(0.0, pools[ph.flavor].devices - ph.allocated) for ph in pool_hours}
    measured = [
        WorkloadHour(unit, path, flavor, workload, hour, peak, devices)
        for unit, path, flavor, workload, hour, peak, devices in MemoryHour.objects.filter(
            hour__gte=start, hour__lt=end, flavor_id__in=list(pools)
        ).values_list("unit_id", "unit__path", "flavor_id", "workload", "hour", "peak_mib", "devices")
    ]
    hours = int((end - start).total_seconds() // 3600)
    over = [_with_action(f) for f in over_specified(measured, pools, idle, start, end, th.anomaly_min_device_hours)]
    return over + stranded_pools(pool_hours, pools, measured, hours, start, end)


def _with_action(found: Found) -> Found:
    """The quota remedy as a one-click change request, where it passes the invariants as one change:
    the unit's guarantee on the smaller flavor raised by the devices its fitting work held at once
    (95th percentile). Where its parent has no room, the suggestion says so instead."""
    from dataclasses import replace

    from quotas.models import OrgUnit, Quota
    from quotas.policy.invariants import check_quota_edits
    from quotas.policy.quantity import Resource
    from quotas.policy.snapshot import Quota as CoreQuota
    from quotas.selectors import flavor_keys, neighbourhood_snapshot

    unit = OrgUnit.objects.filter(pk=found.unit or 0, archived_at__isnull=True).first()
    flavor_id, need = found.evidence["fits_flavor_id"], int(found.evidence["concurrent_p95_devices"])
    if unit is None or need <= 0:
        return found
    row = Quota.objects.filter(unit=unit, flavor_id=flavor_id, resource=Resource.GPU.value).first()
    now = CoreQuota(row.guarantee, row.burst, row.lendable) if row else CoreQuota(0, 0, 0)
    wanted = CoreQuota(now.guarantee + need, now.burst, now.lendable)
    key = flavor_keys()[flavor_id]
    problems = check_quota_edits(neighbourhood_snapshot([unit.pk]), {(unit.pk, key, Resource.GPU): wanted})
    if problems:
        said = (
            f" A guarantee of {wanted.guarantee} on {key} does not fit as things stand ({problems[0].message}): "
            "make room above it first."
        )
        return replace(found, suggestion=found.suggestion + said)
    said = (
        f" One click asks for {unit.slug}'s guarantee on {key} to go from {now.guarantee} to {wanted.guarantee} "
        "(what its fitting work held at once)."
    )
    action = {"unit": unit.pk, "flavor": flavor_id, "guarantee": wanted.guarantee}
    return replace(found, action=action, suggestion=found.suggestion + said)
