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

from django.core.cache import cache
from django.db.models import DurationField, ExpressionWrapper, F, Max
from django.utils import timezone

from accounting.models import FragmentationSample, SourceKind, SourceRun, WorkloadRecord
from accounting.policy.estimate import Band, Calibration, PastJob, calibrate, wait_band
from accounting.policy.kueue_ask import ask_from_json
from accounting.policy.sacct import EndState
from accounting.policy.waiting import Cause, Explanation, Holding, LiveView, Pending, WayOut, explain
from accounting.services.kueue_queues import cached_queue
from quotas.models import Cluster, ResourceFlavor
from quotas.policy.invariants import check_quota_edits
from quotas.policy.placement import matching_flavors
from quotas.policy.quantity import Resource
from quotas.policy.snapshot import OrgSnapshot, Quota
from quotas.selectors import org_snapshot

WAITING_STATES = (EndState.PENDING.value, EndState.REQUEUED.value, EndState.PREEMPTED.value)
"""A Workload that waits for quota: never admitted, requeued, or preempted and waiting again."""
KINDS = {
    "job": "Job",
    "jobset": "JobSet",
    "pytorchjob": "PyTorchJob",
    "mpijob": "MPIJob",
    "tfjob": "TFJob",
    "leaderworkerset": "LeaderWorkerSet",
    "rayjob": "RayJob",
    "raycluster": "RayCluster",
}


@dataclass(frozen=True, kw_only=True)
class Told:
    """What every waiting answer carries, Kueue's or Slurm's: the explanation, the ways out as checked, the age
    of the live state, the band and its calibration, and the scheduler's own figures for the queue."""

    explanation: Explanation
    ways_out: tuple[tuple[WayOut, str], ...]
    """Each way out with why it cannot be taken as it is ('' when it can)."""
    age_s: float | None
    """Seconds since the live state was last refreshed from the scheduler; None: never."""
    estimate: Band | None = None
    calibration: Calibration | None = None
    queue_says: str = ""
    """The scheduler's own figures for its queue with their age (Kueue: the ClusterQueue from the watcher's cache,
    accounting.services.kueue_queues; Slurm: the account's QOS); '' when none could be read."""

    @property
    def start_after(self) -> datetime | None:
        return timezone.now() + timedelta(seconds=self.estimate.after_s) if self.estimate else None

    @property
    def start_by(self) -> datetime | None:
        return timezone.now() + timedelta(seconds=self.estimate.by_s) if self.estimate else None


@dataclass(frozen=True, kw_only=True)
class Answer(Told):
    """A Kueue workload's answer: the record it explains."""

    record: WorkloadRecord


def cluster_flavors(cluster: Cluster) -> list[ResourceFlavor]:
    return list(ResourceFlavor.objects.filter(cluster=cluster).order_by("queue_order", "name"))


def observed_at(cluster: Cluster) -> datetime | None:
    """When the watcher last folded the cluster's Workloads (its watermark)."""
    found = SourceRun.objects.filter(cluster=cluster, source=SourceKind.KUEUE).aggregate(at=Max("watermark"))
    return found["at"]


def live_view(cluster: Cluster, *, units: Iterable[int] | None = None) -> LiveView:
    """What every admitted workload of the cluster holds, and what waits (only ``units``' when given):
    two queries."""
    flavors = cluster_flavors(cluster)
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
    if record.state not in WAITING_STATES:  # admitted or ended: it waits for nothing, and says what it is
        explanation = replace(explanation, causes=(_not_waiting(record),), ways_out=(), room={})
    checked = tuple((w, way_blocked_by(snapshot, record.unit_id, w)) for w in explanation.ways_out)
    age = (now - view.observed_at).total_seconds() if view.observed_at else None
    waited = (now - record.submitted_at).total_seconds() if record.submitted_at else 0.0
    band = (
        estimate(record.cluster, record.unit_id, _one(explanation), waited) if record.state in WAITING_STATES else None
    )
    return Answer(
        record=record,
        explanation=explanation,
        ways_out=checked,
        age_s=age,
        estimate=band,
        calibration=calibration(record.cluster),
        queue_says=_queue_says(record),
    )


def _not_waiting(record: WorkloadRecord) -> Cause:
    """What a workload that is not waiting is: admitted (and where, since when), or how it ended."""
    where = f" on {record.flavor_name}" if record.flavor_name else ""
    if record.state == EndState.RUNNING.value:
        since = f" since {record.admitted_at:%Y-%m-%d %H:%M} UTC" if record.admitted_at else ""
        title = f"admitted{where}{since}: it is running, not waiting"
    else:
        ended = f" at {record.ended_at:%Y-%m-%d %H:%M} UTC" if record.ended_at else ""
        title = f"it is not waiting: it {record.state}{ended}"
    return Cause("not-waiting", title, (), 100)


def _queue_says(record: WorkloadRecord) -> str:
    """Its ClusterQueue as Kueue counts it: the one it was admitted to, else its LocalQueue's (Allot names a
    LocalQueue after its ClusterQueue). From the cache: no query, no request to the API server."""
    resources = record.resources or {}
    status, at = cached_queue(record.cluster, str(resources.get("clusterQueue") or resources.get("queue") or ""))
    if status is None or at is None:
        return ""
    return (
        f"{status.said(f'{record.cluster.name}/')} (read {max(0.0, (timezone.now() - at).total_seconds()):.0f} s ago)"
    )


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


def way_blocked_by(snapshot: OrgSnapshot, unit_id: int | None, way: WayOut) -> str:
    """Why a quota change cannot be made as one edit ('' when the invariants accept it)."""
    if way.change is None or unit_id is None or way.flavor is None:
        return ""
    key = (unit_id, way.flavor, Resource.GPU)
    old = snapshot.quotas.get(key, Quota())
    edit = replace(old, guarantee=way.change["guarantee"], burst=way.change["burst"])
    problems = check_quota_edits(snapshot, {key: edit})
    return "; ".join(f"{p.message} ({p.hint})" if p.hint else p.message for p in problems[:2])


# --- when: a band from the cluster's recorded waits, and its calibration (accounting.policy.estimate) -------
HISTORY_DAYS = 30
CALIBRATION_SECONDS = 3600


def _one(found: Explanation) -> str:
    """The flavor the estimate is for: the only one it may use, else '' (the cluster's jobs on any)."""
    return next(iter(found.room)) if len(found.room) == 1 else ""


def past_jobs(cluster: Cluster, *, days: int = HISTORY_DAYS) -> list[PastJob]:
    """The cluster's recorded jobs submitted in the last ``days`` that started: one query."""
    since = timezone.now() - timedelta(days=days)
    keys = {f.name: f.key for f in cluster_flavors(cluster)}
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
