"""Why a Slurm job waits, from the cluster's queue: ``squeue`` (every job, its reason, every form of GPU request
counted as job_submit.lua counts them, submit time, priority) and slurmctld's count of the job's QOS, each read at
most every ALLOT_SLURM_QUEUE_SECONDS and shared through the cache, explained in the same terms as a Kueue
Workload (accounting.policy.slurm_waiting) with the same checks of its ways out and the same estimate."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from accounting.policy.slurm_qos import parse_assoc_mgr_qos, qos_said
from accounting.policy.slurm_waiting import (
    FIELDS,
    WAITING,
    QueuedJob,
    SlurmMaps,
    explain_slurm,
    parse_squeue,
    slurm_view,
)
from accounting.policy.waiting import LiveView
from accounting.selectors.visibility import job_reader
from accounting.services.ingest import slurm_cluster_name
from accounting.services.waiting import Told, blocks, calibration, cluster_flavors, estimate, way_blocked_by
from quotas.integrations.slurm import SlurmError, SlurmInventory
from quotas.models import Cluster, ClusterKind, OrgUnit
from quotas.policy.snapshot import OrgSnapshot
from quotas.selectors import org_snapshot


@dataclass(frozen=True, kw_only=True)
class SlurmAnswer(Told):
    """A Slurm job's answer: the job as squeue lists it; ``queue_says`` is slurmctld's count of its QOS."""

    cluster: Cluster
    job: QueuedJob
    unit_path: str


def slurm_queue(cluster: Cluster, *, runner: SlurmInventory | None = None) -> tuple[list[QueuedJob], datetime]:
    """The cluster's queue as ``squeue`` lists it (every state), read again only when the copy in the
    shared cache is older than ALLOT_SLURM_QUEUE_SECONDS: every web and worker process reads the same one."""
    key = f"allot:squeue:{cluster.pk}"
    cached = cache.get(key)
    now = timezone.now()
    if cached is not None and (now - cached[1]).total_seconds() < settings.ALLOT_SLURM_QUEUE_SECONDS:
        return parse_squeue(cached[0], ZoneInfo(settings.ALLOT_SLURM_TIMEZONE)), cached[1]
    runner = runner or SlurmInventory(scontrol=settings.ALLOT_SLURM_SCONTROL, squeue=settings.ALLOT_SLURM_SQUEUE)
    text = runner.queue_fields(slurm_cluster_name(cluster), FIELDS)
    cache.set(key, (text, now), timeout=max(60, 10 * settings.ALLOT_SLURM_QUEUE_SECONDS))
    return parse_squeue(text, ZoneInfo(settings.ALLOT_SLURM_TIMEZONE)), now


def slurm_maps(cluster: Cluster) -> SlurmMaps:
    units: dict[str, int] = {}
    paths: dict[int, str] = {}
    for uid, slug, account, path in OrgUnit.objects.filter(archived_at__isnull=True).values_list(
        "id", "slug", "slurm_account", "path"
    ):
        units.setdefault(account or slug, uid)
        paths[uid] = path
    flavors = {f.name: f.key for f in cluster_flavors(cluster)}
    default = next(iter(flavors.values()), "")
    return SlurmMaps(cluster.name, units, paths, flavors, default, cluster.slurm_qos_prefix)


def explain_slurm_job(cluster: Cluster, job_id: str, *, runner: SlurmInventory | None = None) -> SlurmAnswer | None:
    jobs, at = slurm_queue(cluster, runner=runner)
    job = next((j for j in jobs if j.job_id == job_id), None)
    if job is None:
        return None
    maps = slurm_maps(cluster)
    return _answer(cluster, _view(cluster, jobs, at, maps), jobs, job, maps, org_snapshot(), runner)


def unit_waiting_slurm(unit_ids: Iterable[int], *, reader: Any = None, limit: int = 50) -> list[SlurmAnswer]:
    """The pending jobs of units on every enabled Slurm cluster that ``reader`` may read (None: every one), the
    oldest ``limit`` of them, each explained (only those): each cluster's queue read through the shared cache;
    a cluster whose squeue cannot be read is left out (and not asked again for ALLOT_SLURM_QUEUE_SECONDS)."""
    ids = set(unit_ids)
    may = job_reader(reader) if reader is not None else None
    picked: list[tuple[Cluster, QueuedJob]] = []
    queues: dict[int, tuple[list[QueuedJob], datetime, SlurmMaps]] = {}
    for cluster in Cluster.objects.filter(kind=ClusterKind.SLURM, enabled=True).exclude(connection_ref=""):
        failed = f"allot:squeue-failed:{cluster.pk}"
        if cache.get(failed):
            continue
        try:
            jobs, at = slurm_queue(cluster)
        except SlurmError:
            cache.set(failed, True, timeout=max(1, settings.ALLOT_SLURM_QUEUE_SECONDS))
            continue
        maps = slurm_maps(cluster)
        queues[cluster.pk] = (jobs, at, maps)
        for job in jobs:
            unit = maps.units.get(job.account)
            if job.state in WAITING and unit in ids and (may is None or may(unit, maps.paths.get(unit, ""), job.user)):
                picked.append((cluster, job))
    if not picked:
        return []
    far = timezone.now()
    picked = sorted(picked, key=lambda p: (p[1].submitted or far, p[0].name, p[1].job_id))[:limit]
    snapshot = org_snapshot()
    views: dict[int, LiveView] = {}
    found = []
    for cluster, job in picked:
        jobs, at, maps = queues[cluster.pk]
        if cluster.pk not in views:  # one live view per cluster, however many of its jobs are shown
            views[cluster.pk] = _view(cluster, jobs, at, maps)
        found.append(_answer(cluster, views[cluster.pk], jobs, job, maps, snapshot, None))
    return found


def _view(cluster: Cluster, jobs: list[QueuedJob], at: datetime, maps: SlurmMaps) -> LiveView:
    return replace(slurm_view(jobs, maps, at), blocks=blocks(cluster_flavors(cluster)))


def readable_jobs(user: Any, answers: list[SlurmAnswer]) -> list[SlurmAnswer]:
    """The answers whose job the reader may read (the work rule for a job that is no record: job_reader)."""
    may = job_reader(user)
    paths = {a.unit_path for a in answers}
    units = dict(OrgUnit.objects.filter(path__in=paths).values_list("path", "id"))
    return [a for a in answers if may(units.get(a.unit_path), a.unit_path, a.job.user)]


def _answer(
    cluster: Cluster,
    view: LiveView,
    jobs: list[QueuedJob],
    job: QueuedJob,
    maps: SlurmMaps,
    snapshot: OrgSnapshot,
    runner: SlurmInventory | None,
) -> SlurmAnswer:
    now = timezone.now()
    explanation = explain_slurm(snapshot, view, job, maps, now=now, queue=jobs)
    unit = maps.units.get(job.account)
    checked = tuple((w, way_blocked_by(snapshot, unit, w)) for w in explanation.ways_out)
    waited = (now - job.submitted).total_seconds() if job.submitted else 0.0
    qos = [f"{maps.qos_prefix}guar-{job.account}", f"{maps.qos_prefix}burst-{job.account}"]
    if job.qos not in qos:
        qos.insert(0, job.qos)
    return SlurmAnswer(
        cluster=cluster,
        job=job,
        unit_path=maps.paths.get(unit or 0, ""),
        explanation=explanation,
        ways_out=checked,
        age_s=(now - view.observed_at).total_seconds() if view.observed_at else None,
        estimate=estimate(cluster, unit, maps.flavor(job), waited),
        calibration=calibration(cluster),
        queue_says=_qos_says(cluster, qos, job.gpu_type, runner),
    )


def _qos_says(cluster: Cluster, names: list[str], gpu_type: str | None, runner: SlurmInventory | None) -> str:
    """The job's QOS as slurmctld counts them, read at most every ALLOT_SLURM_QUEUE_SECONDS per set of QOS and
    shared through the cache; '' when slurmctld cannot be asked (the explanation stands without it)."""
    key = f"allot:qos-usage:{cluster.pk}:{','.join(names)}"
    cached = cache.get(key)
    now = timezone.now()
    if cached is None or (now - cached[1]).total_seconds() >= settings.ALLOT_SLURM_QUEUE_SECONDS:
        runner = runner or SlurmInventory(scontrol=settings.ALLOT_SLURM_SCONTROL, squeue=settings.ALLOT_SLURM_SQUEUE)
        try:
            cached = (runner.qos_usage(slurm_cluster_name(cluster), names), now)
        except SlurmError:
            return ""
        cache.set(key, cached, timeout=max(60, 10 * settings.ALLOT_SLURM_QUEUE_SECONDS))
    said = qos_said(parse_assoc_mgr_qos(cached[0]), names, gpu_type)
    return f"{said} (read {(now - cached[1]).total_seconds():.0f} s ago)" if said else ""
