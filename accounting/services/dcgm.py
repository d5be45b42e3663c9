"""GPU activity from DCGM through Prometheus: hourly active device-hours per unit and flavor.

Each run reads whole hours from the last successful watermark minus an overlap
(``ALLOT_USAGE_DCGM_OVERLAP_SECONDS``: the current hour, still filling, is read again next time) to
now, from the Prometheus ``ALLOT_DCGM_PROMETHEUS`` names for the cluster, with one
``avg_over_time`` and one ``count_over_time`` range query per activity metric
(``accounting.policy.dcgm``). A pod's GPU belongs to the unit its namespace is bound to; a Slurm
job's to the unit of its recorded job. The run rewrites the cluster's ``ActivityHour`` rows of the
hours it read, in one transaction. Where a workload reports progress (``accounting.policy.dcgm``
PROGRESS_DOC), its productive device-hours are measured from it and stored beside its activity; each
workload's peak device memory per hour is stored too (``MemoryHour``; MEMORY_DOC).
What it cannot use is counted on the run: GPUs no workload holds, namespaces or jobs that map to
no unit, values outside 0–100 %, hours without any sample (gaps), and Prometheus's clock when it
differs from ours. A PromQL error, a timeout or a Prometheus that is down fails the run with the
exact error; nothing is written and the watermark stays.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounting.integrations.prometheus import Prometheus, PrometheusError
from accounting.models import ActivityHour, MemoryHour, SourceKind, SourceRun, SourceStatus, WorkloadRecord
from accounting.policy.dcgm import (
    MemoryPeak,
    Owner,
    activity,
    gaps,
    memory_peaks,
    parse_metrics,
    points,
    progress,
    renamed_targets,
)
from quotas.models import Cluster, ClusterKind, NamespaceBinding, ResourceFlavor
from quotas.selectors import units_by_queue_name

SKEW_TOLERANCE_SECONDS = 30


def prometheus_for(cluster: Cluster) -> Prometheus:
    url = settings.ALLOT_DCGM_PROMETHEUS.get(cluster.name)
    if not url:
        raise ValueError(f"no Prometheus for {cluster.name}: add {cluster.name}=http://… to ALLOT_DCGM_PROMETHEUS")
    return Prometheus(url, timeout=settings.ALLOT_DCGM_TIMEOUT_SECONDS)


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def read_window(source: str, cluster: Cluster, now: datetime) -> tuple[datetime, datetime]:
    """The hours a Prometheus read of ``source`` covers: from its last watermark less the overlap (or the
    lookback on a cluster's first read) to the hour ``now`` is in (read as far as it goes)."""
    previous = (
        SourceRun.objects.filter(source=source, cluster=cluster, watermark__isnull=False)
        .exclude(status=SourceStatus.FAILED)
        .order_by("-watermark")
        .first()
    )
    if previous and previous.watermark:
        start = _hour(previous.watermark - timedelta(seconds=settings.ALLOT_USAGE_DCGM_OVERLAP_SECONDS))
    else:
        start = _hour(now - timedelta(seconds=settings.ALLOT_USAGE_DCGM_LOOKBACK_SECONDS))
    return start, _hour(now)


def usage_ingest_dcgm(
    *, cluster: Cluster, prometheus: Prometheus | None = None, now: datetime | None = None
) -> SourceRun:
    """Read ``cluster``'s GPU activity from its last watermark (see the module docstring). Returns the
    recorded SourceRun; Prometheus's failures are recorded in it, not raised."""
    now = now or timezone.now()
    prometheus = prometheus or prometheus_for(cluster)
    start, last = read_window(SourceKind.DCGM, cluster, now)
    run = SourceRun.objects.create(
        source=SourceKind.DCGM,
        cluster=cluster,
        name=prometheus.url,
        started_at=timezone.now(),
        window_start=start,
        window_end=now,
    )
    counts: dict[str, int] = {}
    messages: list[str] = []
    try:
        skew = prometheus.server_time() - now.timestamp()
        if abs(skew) > SKEW_TOLERANCE_SECONDS:
            counts["clock_skew_seconds"] = round(skew)
            messages.append(f"Prometheus's clock is {skew:+.0f} s from ours")
        answers = []
        for metric, scale in parse_metrics(settings.ALLOT_DCGM_METRICS):
            stamps = (start + timedelta(hours=1), last + timedelta(hours=1))  # each value ends its hour
            averages = prometheus.query_range(f"avg_over_time({metric}[1h])", *stamps, 3600)
            samples = prometheus.query_range(f"count_over_time({metric}[1h])", *stamps, 3600)
            answers.append((metric, scale, averages, samples))
        steps, rate = settings.ALLOT_PROGRESS_METRIC, settings.ALLOT_PROGRESS_RATE_METRIC
        progress_answers = (
            prometheus.query_range(f"increase({steps}[1h])", *stamps, 3600),
            prometheus.query_range(f"count_over_time({steps}[1h])", *stamps, 3600),
            prometheus.query_range(f"max_over_time({rate}[1h])", *stamps, 3600),
        )
        memory_answers = [
            prometheus.query_range(f"max_over_time({metric}[1h])", *stamps, 3600)
            for metric in settings.ALLOT_DCGM_MEMORY_METRICS
        ]
    except PrometheusError as exc:
        run.status, run.message = SourceStatus.FAILED, str(exc)
        run.counts, run.finished_at = counts, timezone.now()
        run.save()
        return run
    renamed = renamed_targets(averages for _, _, averages, _ in answers)
    per_metric = [(m, scale, points(m, avg, n, renamed)) for m, scale, avg, n in answers]
    found = activity(per_metric, scrape_seconds=settings.ALLOT_DCGM_SCRAPE_SECONDS)
    counts.update(found.counts)
    shares, progress_counts = progress(
        *progress_answers, scrape_seconds=settings.ALLOT_DCGM_SCRAPE_SECONDS, renamed=renamed
    )
    for key, n in progress_counts.items():
        counts[key] = counts.get(key, 0) + n
    measured: dict[tuple[Owner, datetime], tuple[float, float, float | None, float]] = {}
    for (owner, hour), value in found.active.items():
        seen = found.observed[(owner, hour)]
        share = shares.get((owner.who, hour))
        measured[(owner, hour)] = (
            value,
            seen,
            None if share is None else seen * share,
            seen if share is not None else 0.0,
        )
    counts["reporting_progress"] = sum(1 for m in measured.values() if m[2] is not None)
    missing = gaps(start, _hour(now), found.hours_with_data)  # the current hour is not over: never a gap
    counts["gap_hours"] = len(missing)
    if missing:
        messages.append("hours without any GPU sample: " + ", ".join(f"{h:%Y-%m-%d %H:00}" for h in missing[:6]))
    rows = _attribute(cluster, measured, counts, messages)
    memory = _memory_rows(cluster, memory_peaks(memory_answers, renamed), run)
    counts["memory_rows"] = len(memory)
    with transaction.atomic():
        MemoryHour.objects.filter(cluster=cluster, hour__gte=start, hour__lte=last).delete()
        MemoryHour.objects.bulk_create(memory)
        ActivityHour.objects.filter(cluster=cluster, hour__gte=start, hour__lte=last).delete()
        ActivityHour.objects.bulk_create(
            [
                ActivityHour(
                    cluster=cluster,
                    unit_id=u,
                    flavor_id=f,
                    hour=h,
                    active=a,
                    observed=o,
                    productive=p,
                    reporting=r,
                    source_run=run,
                )
                for (u, f, h), (a, o, p, r) in sorted(rows.items())
            ]
        )
        counts["activity_rows"] = len(rows)
        run.counts, run.message = counts, "; ".join(messages)
        run.problems = [{"line": 0, "text": "value", "error": p} for p in found.problems]
        run.status = SourceStatus.PARTIAL if counts.get("impossible_values") else SourceStatus.OK
        run.watermark, run.finished_at = now, timezone.now()
        run.save()
    return run


Measured = tuple[float, float, "float | None", float]
"""Device-hours: active, observed (with telemetry), productive (None: no progress reported), reporting."""


def _attribute(
    cluster: Cluster,
    measured: dict[tuple[Owner, datetime], Measured],
    counts: dict[str, int],
    messages: list[str],
) -> dict[tuple[int, int, datetime], Measured]:
    """(unit, flavor, hour) → active, observed, productive and reporting device-hours. Pods: the
    namespace's bound unit, the flavor whose accelerator model the GPU reports (or the cluster's only
    flavor; a MIG instance: the flavor that offers its profile). Slurm jobs: the unit and flavor of the
    recorded job. A MIG instance's device-hours are weighed in GPU-equivalents (its profile's weight)."""
    resolve = _resolver(cluster, {owner for owner, _ in measured})
    rows: dict[tuple[int, int, datetime], Measured] = {}
    unresolved: set[str] = set()
    for (owner, hour), (active, observed, productive, reporting) in measured.items():
        unit, flavor, what, weight = resolve(owner)
        if unit is None:
            counts["unresolved_owner"] = counts.get("unresolved_owner", 0) + 1
            unresolved.add(what)
            continue
        if flavor is None or weight is None:
            counts["unresolved_flavor"] = counts.get("unresolved_flavor", 0) + 1
            unresolved.add(
                f"MIG profile {owner.profile!r} (no flavor offers it)" if owner.profile else f"model {owner.model!r}"
            )
            continue
        key = (unit, flavor, hour)
        a, o, p, r = rows.get(key, (0.0, 0.0, None, 0.0))
        if productive is not None:
            p = (p or 0.0) + productive * weight
        rows[key] = (a + active * weight, o + observed * weight, p, r + reporting * weight)
    if unresolved:
        messages.append("not attributed: " + ", ".join(sorted(unresolved)[:10]))
    return rows


def _resolver(cluster: Cluster, owners: set[Owner]) -> Any:
    """Owner → (unit id, flavor id, what it is): pods by their namespace's bound unit and the flavor
    whose accelerator model the GPU reports (or the cluster's only flavor); Slurm jobs by their
    recorded job (a query or three, whatever the number of owners)."""
    flavors = list(ResourceFlavor.objects.filter(cluster=cluster))
    whole = [f for f in flavors if not f.sharing_spec.shared]
    by_model = {_model(f.accelerator_model): f.pk for f in whole}
    only = whole[0].pk if len(whole) == 1 else None
    # a MIG instance's profile → the flavor offering it and its weight (one weight per profile on a cluster)
    offers = {p.name: f.pk for f in flavors for p in f.sharing_spec.profiles}
    weights = {f.pk: {p.name: float(p.weight) for p in f.sharing_spec.profiles} for f in flavors}
    namespaces = dict(NamespaceBinding.objects.filter(cluster=cluster).values_list("namespace", "unit_id"))
    queues = units_by_queue_name({owner.queue for owner in owners if owner.queue})
    jobs: dict[str, tuple[Any, Any]] = {}
    if cluster.kind == ClusterKind.SLURM:
        wanted = {owner.job for owner in owners if owner.job}
        for job_id, unit_id, flavor_id in (
            WorkloadRecord.objects.filter(cluster=cluster, job_id__in=wanted)
            .order_by("submitted_at")
            .values_list("job_id", "unit_id", "flavor_id")
        ):
            jobs[job_id] = (unit_id, flavor_id)  # the latest of a reused id wins

    def weigh(flavor: Any, profile: str) -> tuple[Any, float | None]:
        """The flavor and a device-hour's weight: 1 for a whole GPU; a MIG instance its profile's."""
        if not profile:
            return flavor, 1.0
        if flavor is None:
            flavor = offers.get(profile)
        return flavor, weights.get(flavor, {}).get(profile)

    def resolve(owner: Owner) -> tuple[Any, Any, str, float | None]:
        if owner.job:
            unit, recorded = jobs.get(owner.job, (None, None))
            flavor, weight = weigh(recorded, owner.profile)
            return unit, flavor, f"job {owner.job}", weight
        unit, what = namespaces.get(owner.namespace), f"namespace {owner.namespace}"
        if unit is None and owner.queue:  # a namespace bound to no unit: Kueue's ClusterQueue label names it
            unit, what = queues.get(owner.queue), f"ClusterQueue {owner.queue}"
        flavor, weight = weigh(None if owner.profile else by_model.get(_model(owner.model), only), owner.profile)
        return unit, flavor, what, weight

    return resolve


def _memory_rows(cluster: Cluster, peaks: list[MemoryPeak], run: SourceRun) -> list[MemoryHour]:
    """The workloads' hourly memory peaks that map to a unit and flavor (MEMORY_DOC)."""
    resolve = _resolver(cluster, {p.owner for p in peaks})
    rows = []
    for peak in peaks:
        unit, flavor, _, _ = resolve(peak.owner)
        if unit is None or flavor is None:
            continue
        workload = f"job {peak.owner.job}" if peak.owner.job else f"{peak.owner.namespace}/{peak.owner.pod}"
        rows.append(
            MemoryHour(
                cluster=cluster, unit_id=unit, flavor_id=flavor, workload=workload[:253], hour=peak.hour,
                peak_mib=peak.peak_mib, devices=peak.devices, source_run=run,
            )
        )  # fmt: skip
    return rows


def _model(name: str) -> str:
    """'NVIDIA H100 80GB HBM3', 'NVIDIA-H100-80GB-HBM3' and 'nvidia h100 80gb hbm3' are one model."""
    return "".join(ch for ch in name.lower() if ch.isalnum())
