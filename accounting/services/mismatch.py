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
    return over_specified(measured, pools, idle, start, end, th.anomaly_min_device_hours) + stranded_pools(
        pool_hours, pools, measured, hours, start, end
    )
