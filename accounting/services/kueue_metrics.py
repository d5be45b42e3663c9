"""Kueue's own numbers through the Prometheus path that reads DCGM, and the cross-check with Allot's
records (issue #30.3).

``usage_ingest_kueue_metrics`` reads, per ClusterQueue, flavor and hour, Kueue's GPU usage and
reservation (``kueue_cluster_queue_resource_usage`` / ``_reservation``, averaged over the hour; they need
``metrics.enableClusterQueueResources``, which the configuration Allot serves sets) and its pending
workloads, from the cluster's Prometheus (``ALLOT_DCGM_PROMETHEUS``), for the hours since the last read
and the overlap before (``ALLOT_USAGE_DCGM_OVERLAP_SECONDS``); the rows of those hours are replaced, so a
re-read writes the same rows. Each run is a SourceRun (source ``kueue_metrics``).

``kueue_crosscheck_found`` puts each queue-hour beside the devices Allot's rollups say the queue's unit
held and runs the pure rule (accounting.policy.kueue_crosscheck) for the findings.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from accounting.integrations.prometheus import Prometheus, PrometheusError
from accounting.models import KueueQueueHour, SourceKind, SourceRun, SourceStatus, UsageHour
from accounting.policy.findings import Found
from accounting.policy.kueue_crosscheck import QueueHour, crosscheck
from accounting.services.dcgm import prometheus_for, read_window
from quotas.models import Cluster, OrgUnit, ResourceFlavor
from quotas.selectors import units_by_queue_name

GPU = "nvidia.com/gpu"
QUEUE_SUM = (
    'sum by (cluster_queue, flavor) (avg_over_time(kueue_cluster_queue_resource_{what}{{resource="{gpu}"}}[1h]))'
)
QUERIES = {
    "usage": QUEUE_SUM.format(what="usage", gpu=GPU),
    "reservation": QUEUE_SUM.format(what="reservation", gpu=GPU),
    "pending": "sum by (cluster_queue) (avg_over_time(kueue_pending_workloads[1h]))",
}


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _values(answer: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple[Any, ...], float]:
    """Each series' values by (its labels ``keys``…, the hour the value ends)."""
    found: dict[tuple[Any, ...], float] = {}
    for series in answer:
        labels = series.get("metric") or {}
        for stamp, value in series.get("values") or ():
            hour = datetime.fromtimestamp(float(stamp), tz=UTC) - timedelta(hours=1)
            found[(*(labels.get(k, "") for k in keys), hour)] = float(value)
    return found


def usage_ingest_kueue_metrics(
    *, cluster: Cluster, prometheus: Prometheus | None = None, now: datetime | None = None
) -> SourceRun:
    """Read ``cluster``'s Kueue queue metrics (see the module docstring); Prometheus's failures are
    recorded on the run, not raised."""
    now = now or timezone.now()
    prometheus = prometheus or prometheus_for(cluster)
    start, last = read_window(SourceKind.KUEUE_METRICS, cluster, now)
    run = SourceRun.objects.create(
        source=SourceKind.KUEUE_METRICS,
        cluster=cluster,
        name=prometheus.url,
        started_at=timezone.now(),
        window_start=start,
        window_end=now,
    )
    try:
        stamps = (start + timedelta(hours=1), last + timedelta(hours=1))  # each value ends its hour
        answers = {name: prometheus.query_range(query, *stamps, 3600) for name, query in QUERIES.items()}
    except PrometheusError as exc:
        run.status, run.message, run.finished_at = SourceStatus.FAILED, str(exc), timezone.now()
        run.save()
        return run
    usage = _values(answers["usage"], ("cluster_queue", "flavor"))
    reservation = _values(answers["reservation"], ("cluster_queue", "flavor"))
    pending = _values(answers["pending"], ("cluster_queue",))
    keys = sorted(set(usage) | set(reservation))
    units = units_by_queue_name({queue for queue, _, _ in keys})
    flavors = dict(ResourceFlavor.objects.filter(cluster=cluster).values_list("name", "pk"))
    rows = [
        KueueQueueHour(
            cluster=cluster,
            cluster_queue=queue,
            unit_id=units.get(queue),
            flavor_id=flavors.get(flavor),
            flavor_name=flavor,
            hour=hour,
            usage=usage.get((queue, flavor, hour), 0.0),
            reservation=reservation.get((queue, flavor, hour), 0.0),
            pending=pending.get((queue, hour)),
            source_run=run,
        )
        for queue, flavor, hour in keys
    ]
    unresolved = sorted({r.cluster_queue for r in rows if r.unit_id is None})
    with transaction.atomic():
        KueueQueueHour.objects.filter(cluster=cluster, hour__gte=start, hour__lte=last).delete()
        KueueQueueHour.objects.bulk_create(rows)
        run.counts = {
            "queue_hours": len(rows),
            "queues": len({r.cluster_queue for r in rows}),
            "unresolved": len(unresolved),
        }
        run.message = (
            f"ClusterQueues that are no unit of Allot's: {', '.join(unresolved[:6])}" if unresolved else ""
        ) or ("" if rows else "no Kueue queue metrics: is metrics.enableClusterQueueResources on?")
        run.status = SourceStatus.OK
        run.watermark, run.finished_at = now, timezone.now()
        run.save()
    return run


def _queue_of_units(queues: dict[int, str]) -> dict[int, int]:
    """Every active unit inside a queue's unit → that queue's unit: itself, or the nearest above it that
    has a queue (a project without a quota of its own runs in its team's ClusterQueue)."""
    by_path = {path: uid for uid, path in queues.items()}
    scope = Q(pk__in=[])
    for path in by_path:
        scope |= Q(path=path) | Q(path__startswith=f"{path}/")
    found = {}
    for uid, path in OrgUnit.objects.filter(scope, archived_at__isnull=True).values_list("id", "path"):
        parts = path.split("/")
        for n in range(len(parts), 0, -1):
            owner = by_path.get("/".join(parts[:n]))
            if owner is not None:
                found[uid] = owner
                break
    return found


def kueue_crosscheck_found(start: datetime, end: datetime) -> list[Found]:
    """Queue-hours of the window beside Allot's held devices for the queue's unit (two queries)."""
    kueue = list(
        KueueQueueHour.objects.filter(hour__gte=start, hour__lt=end, unit__isnull=False, flavor__isnull=False).values(
            "cluster_queue", "unit_id", "unit__path", "flavor_id", "flavor__cluster__name", "flavor__name", "hour",
            "usage", "reservation",
        )
    )  # fmt: skip
    if not kueue:
        return []
    queue_of = _queue_of_units({r["unit_id"]: r["unit__path"] for r in kueue})
    held: dict[tuple[int, int, datetime], float] = defaultdict(float)
    allot = (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, unit_id__in=list(queue_of), minutes__gt=0)
        .values("unit_id", "flavor_id", "hour", "minutes")
        .annotate(a=Sum("allocated"))
    )
    for row in allot:  # device-hours over the hour's telemetry: average devices, summed into the unit's queue
        held[(queue_of[row["unit_id"]], row["flavor_id"], row["hour"])] += (row["a"] or 0.0) / (row["minutes"] / 60)
    rows = [
        QueueHour(
            r["cluster_queue"],
            r["unit_id"],
            r["unit__path"],
            r["flavor_id"],
            f"{r['flavor__cluster__name']}/{r['flavor__name']}",
            r["hour"],
            r["usage"],
            r["reservation"],
            round(held.get((r["unit_id"], r["flavor_id"], r["hour"]), 0.0), 3),
        )
        for r in kueue
    ]
    return crosscheck(rows)
