"""Waiting, explained (issue #44): the live view of a cluster's work and the explanations read from it.

The live view is what the usage watcher keeps (``allot_watch_kueue``: a list, then a watch of every
Workload, folded into WorkloadRecords within seconds): each admitted workload with what it holds, each
waiting one with what it asks and Kueue's word on it (accounting.policy.kueue_ask). No question sends a
request to the API server; every answer carries the watcher's last refresh, so its age is shown.

Ways out are checked here against the invariants: a quota change offered is one the tree accepts as a
single edit (quotas.policy.invariants.check_quota_edits), else it is shown with what it would break."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.cache import cache
from django.db.models import DurationField, ExpressionWrapper, F, Max
from django.utils import timezone

from accounting.models import FragmentationSample, SourceKind, SourceRun, WorkloadRecord
from accounting.policy.estimate import Band, Calibration, PastJob, calibrate, wait_band
from accounting.policy.kueue_ask import ask_from_json
from accounting.policy.sacct import EndState
from accounting.policy.slurm_qos import parse_assoc_mgr_qos, qos_said
from accounting.policy.slurm_waiting import FORMAT, QueuedJob, SlurmMaps, explain_slurm, parse_squeue, slurm_view
from accounting.policy.waiting import Explanation, Holding, LiveView, Pending, WayOut, explain
from accounting.services.ingest import slurm_cluster_name
from accounting.services.kueue_queues import cached_queue
from quotas.integrations.slurm import SlurmError, SlurmInventory
from quotas.models import Cluster, OrgUnit, ResourceFlavor
from quotas.policy.invariants import check_quota_edits
from quotas.policy.placement import matching_flavors
from quotas.policy.quantity import Resource
from quotas.policy.snapshot import OrgSnapshot, Quota
from quotas.selectors import org_snapshot

WAITING_STATES = (EndState.PENDING.value, EndState.REQUEUED.value, EndState.PREEMPTED.value)
"""A Workload that waits for quota: never admitted, requeued, or preempted and waiting again."""
KINDS = {"job": "Job", "jobset": "JobSet", "pytorchjob": "PyTorchJob", "rayjob": "RayJob", "raycluster": "RayCluster"}


@dataclass(frozen=True)
class Answer:
    """An explanation with the record it explains and the ways out as checked."""

    record: WorkloadRecord
    explanation: Explanation
    ways_out: tuple[tuple[WayOut, str], ...]
    """Each way out with why it cannot be taken as it is ('' when it can)."""
    age_s: float | None
    """Seconds since the live view was last refreshed from the scheduler; None: never."""
    estimate: Band | None = None
    calibration: Calibration | None = None
    queue_says: str = ""
    """Kueue's own figures for its ClusterQueue (GPUs used and borrowed per flavor, pending, admitted) with
    their age, from the watcher's cache (accounting.services.kueue_queues); '' when none is cached."""

    @property
    def start_after(self) -> datetime | None:
        return timezone.now() + timedelta(seconds=self.estimate.after_s) if self.estimate else None

    @property
    def start_by(self) -> datetime | None:
        return timezone.now() + timedelta(seconds=self.estimate.by_s) if self.estimate else None


def _flavors(cluster: Cluster) -> list[ResourceFlavor]:
    return list(ResourceFlavor.objects.filter(cluster=cluster).order_by("queue_order", "name"))


def observed_at(cluster: Cluster) -> datetime | None:
    """When the watcher last folded the cluster's Workloads (its watermark)."""
    found = SourceRun.objects.filter(cluster=cluster, source=SourceKind.KUEUE).aggregate(at=Max("watermark"))
    return found["at"]


def live_view(cluster: Cluster, *, units: Iterable[int] | None = None) -> LiveView:
    """What every admitted workload of the cluster holds, and what waits (only ``units``' when given):
    two queries."""
    flavors = _flavors(cluster)
    keys = {f.name: f.key for f in flavors}
    labels = {f.name: dict(f.node_labels or {}) for f in flavors}
    holding = tuple(
        Holding(name, unit, path or "", owner, tier, keys.get(flavor or "", f"{cluster.name}/{flavor}"), n, b, at)
        for name, unit, path, owner, tier, flavor, n, b, at in WorkloadRecord.objects.filter(
            cluster=cluster, state=EndState.RUNNING.value, devices__gt=0
        ).values_list(
            "job_id", "unit_id", "unit__path", "owner", "tier", "flavor_name", "devices", "borrowed", "admitted_at"
        )
    )
    waiting = WorkloadRecord.objects.filter(cluster=cluster, state__in=WAITING_STATES)
    if units is not None:
        waiting = waiting.filter(unit_id__in=list(units))
    pending = tuple(
        _pending(
            name, unit, owner, tier, (resources or {}).get("queue", ""), created, (track or {}).get("ask"), keys, labels
        )
        for name, unit, owner, tier, resources, created, track in waiting.values_list(
            "job_id", "unit_id", "owner", "tier", "resources", "submitted_at", "track"
        )
    )
    return LiveView(
        cluster.name, observed_at(cluster), tuple(f.key for f in flavors), holding, pending, blocks(flavors)
    )


def blocks(flavors: list[ResourceFlavor]) -> dict[str, int]:
    """Each flavor's largest free block on one node, from its last node sample of the past two hours (the
    hourly fragmentation sample): one query."""
    keys = {f.pk: f.key for f in flavors}
    since = timezone.now() - timedelta(hours=2)
    found: dict[str, int] = {}
    for flavor, largest in (
        FragmentationSample.objects.filter(flavor_id__in=keys, at__gte=since)
        .order_by("at")
        .values_list("flavor_id", "largest_block")
    ):
        found[keys[flavor]] = largest  # the latest wins
    return found


def _pending(
    name: str,
    unit: int | None,
    owner: str,
    tier: str,
    queue: object,
    created: datetime | None,
    ask_json: Any,
    keys: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]],
) -> Pending:
    ask = ask_from_json(ask_json)
    pinned = matching_flavors(ask.placement, labels) if ask.placement else None
    flavors = None if pinned is None else tuple(keys[n] for n in pinned)
    return Pending(name, unit, owner, tier, str(queue), created, ask, flavors)


def find_waiting(cluster: Cluster, namespace: str, name: str) -> WorkloadRecord | None:
    """A Workload by its name, or by its job's ``kind/name`` (``job/train``) — the newest one."""
    records = WorkloadRecord.objects.filter(cluster=cluster, account=namespace).select_related("unit", "cluster")
    if "/" in name:
        kind, _, job = name.partition("/")
        wanted = f"{KINDS.get(kind.lower(), kind)}/{job}"
        return records.filter(track__ask__job__iexact=wanted).order_by("-submitted_at", "-id").first()
    return records.filter(job_id=f"{namespace}/{name}"[:64]).first()


def explain_record(
    record: WorkloadRecord, *, snapshot: OrgSnapshot | None = None, view: LiveView | None = None
) -> Answer:
    snapshot = snapshot or org_snapshot()
    view = view or live_view(record.cluster, units=[record.unit_id] if record.unit_id else [])
    target = next((p for p in view.pending if p.name == record.job_id), None)
    if target is None:  # not waiting (admitted, ended): explained as what it is
        target = Pending(
            record.job_id,
            record.unit_id,
            record.owner,
            record.tier,
            "",
            record.submitted_at,
            ask_from_json((record.track or {}).get("ask")),
        )
    now = timezone.now()
    explanation = explain(snapshot, view, target, now=now)
    checked = tuple((w, _problem(snapshot, record.unit_id, w)) for w in explanation.ways_out)
    age = (now - view.observed_at).total_seconds() if view.observed_at else None
    waited = (now - record.submitted_at).total_seconds() if record.submitted_at else 0.0
    band = (
        estimate(record.cluster, record.unit_id, _one(explanation), waited) if record.state in WAITING_STATES else None
    )
    return Answer(record, explanation, checked, age, band, calibration(record.cluster), _queue_says(record))


def _queue_says(record: WorkloadRecord) -> str:
    """Its ClusterQueue as Kueue counts it: the one it was admitted to, else its LocalQueue's (Allot names a
    LocalQueue after its ClusterQueue)."""
    resources = record.resources or {}
    status, at = cached_queue(record.cluster, str(resources.get("clusterQueue") or resources.get("queue") or ""))
    if status is None or at is None:
        return ""
    keys = {f.name: f.key for f in _flavors(record.cluster)}
    return f"{status.said(keys)} (read {max(0.0, (timezone.now() - at).total_seconds()):.0f} s ago)"


def unit_waiting(unit_ids: Iterable[int], *, limit: int = 50) -> list[Answer]:
    """The waiting work of units (each cluster's live view read once), oldest first."""
    ids = list(unit_ids)
    records = list(
        WorkloadRecord.objects.filter(unit_id__in=ids, state__in=WAITING_STATES)
        .select_related("unit", "cluster")
        .order_by("submitted_at", "id")[:limit]
    )
    snapshot = org_snapshot() if records else None
    views: dict[int, LiveView] = {}
    out = []
    for record in records:
        if record.cluster_id not in views:
            views[record.cluster_id] = live_view(record.cluster, units=ids)
        out.append(explain_record(record, snapshot=snapshot, view=views[record.cluster_id]))
    return out


def _problem(snapshot: OrgSnapshot, unit_id: int | None, way: WayOut) -> str:
    """Why a quota change cannot be made as one edit ('' when the invariants accept it)."""
    if way.change is None or unit_id is None or way.flavor is None:
        return ""
    key = (unit_id, way.flavor, Resource.GPU)
    old = snapshot.quotas.get(key, Quota())
    edit = replace(old, guarantee=way.change["guarantee"], burst=way.change["burst"])
    problems = check_quota_edits(snapshot, {key: edit})
    return "; ".join(f"{p.message} ({p.hint})" if p.hint else p.message for p in problems[:2])


# --- Slurm: squeue, read at most every ALLOT_SLURM_QUEUE_SECONDS and shared through the cache ---------------
@dataclass(frozen=True)
class SlurmAnswer:
    cluster: Cluster
    job: QueuedJob
    unit_path: str
    explanation: Explanation
    ways_out: tuple[tuple[WayOut, str], ...]
    age_s: float | None
    estimate: Band | None = None
    calibration: Calibration | None = None
    queue_says: str = ""
    """slurmctld's own figures for the job's account QOS (GPUs held of each limit), read with the queue."""


def slurm_queue(cluster: Cluster, *, runner: SlurmInventory | None = None) -> tuple[list[QueuedJob], datetime]:
    """The cluster's queue as ``squeue`` lists it (every state), read again only when the copy in the
    shared cache is older than ALLOT_SLURM_QUEUE_SECONDS: every web and worker process reads the same one."""
    key = f"allot:squeue:{cluster.pk}"
    cached = cache.get(key)
    now = timezone.now()
    if cached is not None and (now - cached[1]).total_seconds() < settings.ALLOT_SLURM_QUEUE_SECONDS:
        return parse_squeue(cached[0], ZoneInfo(settings.ALLOT_SLURM_TIMEZONE)), cached[1]
    runner = runner or SlurmInventory(scontrol=settings.ALLOT_SLURM_SCONTROL, squeue=settings.ALLOT_SLURM_SQUEUE)
    text = runner.queue(slurm_cluster_name(cluster), FORMAT)
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
    flavors = {f.name: f.key for f in _flavors(cluster)}
    default = next(iter(flavors.values()), "")
    return SlurmMaps(cluster.name, units, paths, flavors, default, cluster.slurm_qos_prefix)


def explain_slurm_job(cluster: Cluster, job_id: str, *, runner: SlurmInventory | None = None) -> SlurmAnswer | None:
    jobs, at = slurm_queue(cluster, runner=runner)
    job = next((j for j in jobs if j.job_id == job_id), None)
    if job is None:
        return None
    maps, snapshot = slurm_maps(cluster), org_snapshot()
    now = timezone.now()
    view = replace(slurm_view(jobs, maps, at), blocks=blocks(_flavors(cluster)))
    explanation = explain_slurm(snapshot, view, job, maps, now=now, queue=jobs)
    unit = maps.units.get(job.account)
    checked = tuple((w, _problem(snapshot, unit, w)) for w in explanation.ways_out)
    waited = (now - job.submitted).total_seconds() if job.submitted else 0.0
    band = estimate(cluster, unit, maps.flavor(job), waited)
    qos = [f"{maps.qos_prefix}guar-{job.account}", f"{maps.qos_prefix}burst-{job.account}"]
    if job.qos not in qos:
        qos.insert(0, job.qos)
    return SlurmAnswer(cluster, job, maps.paths.get(unit or 0, ""), explanation, checked, (now - at).total_seconds(),
                       band, calibration(cluster), _qos_says(cluster, qos, job.gpu_type, runner))  # fmt: skip


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


# --- when: a band from the cluster's recorded waits, and its calibration (accounting.policy.estimate) -------
HISTORY_DAYS = 30
CALIBRATION_SECONDS = 3600


def _one(found: Explanation) -> str:
    """The flavor the estimate is for: the only one it may use, else '' (the cluster's jobs on any)."""
    return next(iter(found.room)) if len(found.room) == 1 else ""


def past_jobs(cluster: Cluster, *, days: int = HISTORY_DAYS) -> list[PastJob]:
    """The cluster's recorded jobs submitted in the last ``days`` that started: one query."""
    since = timezone.now() - timedelta(days=days)
    keys = {f.name: f.key for f in _flavors(cluster)}
    rows = WorkloadRecord.objects.filter(
        cluster=cluster, submitted_at__gte=since, admitted_at__isnull=False, admitted_at__gte=F("submitted_at")
    ).values_list("unit_id", "flavor_name", "submitted_at", "admitted_at")
    return [
        PastJob(unit, keys.get(flavor, flavor), submitted, started)
        for unit, flavor, submitted, started in rows
        if submitted is not None and started is not None
    ]


COMPARABLE = 2000
"""At most this many of the most recent comparable waits per scope: a bounded read however busy the cluster."""


def estimate(cluster: Cluster, unit: int | None, flavor: str, waited_s: float) -> Band | None:
    """The band from the cluster's recorded waits of the last 30 days that lasted at least ``waited_s``, on
    ``flavor`` (a key; '' any): its unit's, else everyone's — the most recent COMPARABLE of each, two queries."""
    wait = ExpressionWrapper(F("admitted_at") - F("submitted_at"), output_field=DurationField())
    rows = (
        WorkloadRecord.objects.filter(
            cluster=cluster, submitted_at__gte=timezone.now() - timedelta(days=HISTORY_DAYS), admitted_at__isnull=False
        )
        .annotate(wait=wait)
        .filter(wait__gte=timedelta(seconds=waited_s))
        .order_by("-submitted_at")
    )
    if flavor:
        rows = rows.filter(flavor_name=flavor.split("/", 1)[-1])
    everyone = [w.total_seconds() for w in rows.values_list("wait", flat=True)[:COMPARABLE]]
    own = [w.total_seconds() for w in rows.filter(unit_id=unit).values_list("wait", flat=True)[:COMPARABLE]]
    return wait_band(own, everyone, waited_s)


def calibration(cluster: Cluster) -> Calibration:
    """The cluster's bands replayed over its last 30 days, kept an hour in the shared cache."""
    key = f"allot:wait-calibration:{cluster.pk}"
    found = cache.get(key)
    if found is None:
        found = calibrate(past_jobs(cluster), window_s=14 * 86400)
        cache.set(key, found, timeout=CALIBRATION_SECONDS)
    return cast(Calibration, found)
