"""Kueue usage: every Workload followed through the official client, each condition transition
recorded as it is seen.

Two ways in, one fold (``accounting.policy.kueue.observe``):

* ``usage_resync_kueue`` lists every Workload (in pages) and folds each one into its stored track;
  a Workload Allot still had running that the list no longer holds was deleted unseen and its run
  ends now. It records the list's resourceVersion as the run's ``cursor``. Celery beat runs it
  periodically (``ALLOT_USAGE_KUEUE_RESYNC_SECONDS``), which also makes it the whole source for a
  site that runs no watcher.
* ``usage_watch_kueue`` (``manage.py allot_watch_kueue``) watches from the last cursor and folds each
  event as it arrives: transitions get their own times instead of only the last one. A watch the
  server ends or that drops is opened again from the last resourceVersion seen; a resourceVersion
  the server no longer keeps (410 Gone) is answered by a relist. After a crash the watcher resumes
  from the cursor stored with the last flush.

Each Workload is one ``WorkloadRecord`` (scheduler id = its UID) whose ``track`` holds every run and
eviction seen; its ``Allocation`` rows are rewritten from the track's runs. Its unit comes from the
namespace binding; one in an unbound namespace is kept with no unit and counted. The borrowed part
of a run is fixed when it is first written: how far the unit's devices on that flavor, this run
included, went beyond its guarantee at the run's start.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from math import ceil
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from accounting.models import HELD, Allocation, SourceKind, SourceRun, SourceStatus, WorkloadRecord
from accounting.policy.equivalents import held, share
from accounting.policy.kueue import (
    LABEL_OWNER,
    LABEL_PROJECT,
    LABEL_TIER,
    MULTIKUEUE_ORIGIN,
    Run,
    WorkloadError,
    WorkloadTrack,
    controller_of,
    observe,
    track_from_json,
    track_to_json,
)
from accounting.policy.sacct import EndState
from quotas.integrations.kubernetes import ClusterCallError, KueueClient, api_client_for
from quotas.models import Cluster, ClusterKind, NamespaceBinding, Quota, ResourceFlavor, WorkloadTier
from quotas.policy.kueue.translate import priority_class_name

KEEP_PROBLEMS = 100
GPU = "nvidia.com/gpu"


def kueue_client(cluster: Cluster) -> KueueClient:
    if cluster.kind != ClusterKind.KUBERNETES:
        raise ValueError(f"{cluster.name} is not a Kubernetes cluster")
    return KueueClient(api_client_for(cluster.connection_ref))


@dataclass
class _Tally:
    counts: dict[str, int] = field(
        default_factory=lambda: {"events": 0, "workloads": 0, "problems": 0, "unresolved_namespace": 0}
    )
    problems: list[dict[str, object]] = field(default_factory=list)
    unresolved: set[str] = field(default_factory=set)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def problem(self, where: str, error: str) -> None:
        self.add("problems")
        if len(self.problems) < KEEP_PROBLEMS:
            self.problems.append({"line": 0, "text": where, "error": error})


def _start(cluster: Cluster, name: str) -> SourceRun:
    now = timezone.now()
    return SourceRun.objects.create(
        source=SourceKind.KUEUE, cluster=cluster, name=name, started_at=now, window_start=now, window_end=now
    )


def _close(run: SourceRun, tally: _Tally, *, cursor: str, error: str = "", failed: bool = False) -> SourceRun:
    """Finish the run: failed (nothing read; the watermark stays where it was), partial (problems, or
    an error after some events) or ok."""
    now = timezone.now()
    run.counts = {**tally.counts, "unresolved_namespaces": len(tally.unresolved)}
    run.problems = tally.problems
    messages = []
    if tally.unresolved:
        messages.append("namespaces bound to no unit: " + ", ".join(sorted(tally.unresolved)[:20]))
    if error:
        messages.insert(0, error)
    run.message = "; ".join(messages)
    run.cursor = cursor or run.cursor
    run.window_end = run.finished_at = now
    if failed:
        run.status = SourceStatus.FAILED
    else:
        run.status = SourceStatus.PARTIAL if tally.counts["problems"] or error else SourceStatus.OK
        run.watermark = now
    run.save()
    return run


def last_cursor(cluster: Cluster) -> str:
    run = (
        SourceRun.objects.filter(source=SourceKind.KUEUE, cluster=cluster)
        .exclude(cursor="")
        .order_by("-started_at", "-id")
        .first()
    )
    return run.cursor if run else ""


def usage_resync_kueue(
    *, cluster: Cluster, client: KueueClient | None = None, owners: OwnerCache | None = None
) -> SourceRun:
    """List every Workload and fold each into its record (see the module docstring). Returns the
    SourceRun; an unreachable cluster is recorded on it (status failed, earlier data untouched)."""
    run = _start(cluster, "list")
    tally = _Tally()
    client = client or kueue_client(cluster)
    try:
        items, version = client.list_workloads()
    except (ClusterCallError, ValueError) as exc:
        return _close(run, tally, cursor="", error=f"list Workloads: {exc}", failed=True)
    now = timezone.now()
    tally.add("listed", len(items))
    with transaction.atomic():
        seen = {str((item.get("metadata") or {}).get("uid") or "") for item in items}
        _fold(cluster, run, [("ADDED", item) for item in items], tally, now, client=client, owners=owners)
        gone = (
            WorkloadRecord.objects.filter(cluster=cluster, track__isnull=False)
            .exclude(scheduler_id__in=seen)
            .filter(state__in=[EndState.RUNNING, EndState.PENDING, EndState.PREEMPTED, EndState.REQUEUED])
        )
        deleted = [("DELETED", {"metadata": {"uid": r.scheduler_id}}) for r in gone]
        _fold(cluster, run, deleted, tally, now)
        tally.add("deleted_unseen", len(deleted))
    return _close(run, tally, cursor=version)


def usage_watch_kueue(
    *,
    cluster: Cluster,
    client: KueueClient | None = None,
    stop: Callable[[], bool] = lambda: False,
    timeout_seconds: int = 300,
    flush_seconds: float = 2.0,
    max_watches: int | None = None,
    progress: Callable[[str], None] = lambda _message: None,
) -> list[SourceRun]:
    """Watch Workloads from the last cursor until ``stop()`` (or after ``max_watches`` watch calls),
    folding events in batches every ``flush_seconds``. Each watch call is one SourceRun with the
    events it folded and the cursor it reached. Returns them in order."""
    client = client or kueue_client(cluster)
    runs: list[SourceRun] = []
    cursor = last_cursor(cluster)
    owners: OwnerCache = {}  # each owning job read once per watch session, not at every event of its Workload
    watches = 0
    while not stop() and (max_watches is None or watches < max_watches):
        if not cursor:
            listed = usage_resync_kueue(cluster=cluster, client=client, owners=owners)
            runs.append(listed)
            progress(
                f"listed {listed.counts.get('listed', 0)} Workloads ({listed.counts.get('workloads', 0)} changed): "
                f"{listed.status} {listed.message}"
            )
            if listed.status == SourceStatus.FAILED:
                return runs
            cursor = listed.cursor
        watches += 1
        run = _start(cluster, "watch")
        tally = _Tally()
        pending: list[tuple[str, dict[str, Any]]] = []
        flushed = time.monotonic()
        reached, error = cursor, ""
        events = _reader(client, cursor, timeout_seconds)
        while True:
            # wake often: a stop (SIGTERM) is seen within STOP_POLL_SECONDS, and what was read is flushed
            # within flush_seconds even when no further event comes
            try:
                item = events.get(timeout=min(STOP_POLL_SECONDS, flush_seconds))
            except queue.Empty:
                item = None
            if item is _END:
                break
            if isinstance(item, ClusterCallError):
                error = f"watch from resourceVersion {cursor}: {item}"
                if item.status == 410:
                    tally.add("expired")
                break
            if isinstance(item, tuple):
                kind, obj = item
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                reached = version or reached
                if kind != "BOOKMARK":
                    pending.append((kind, obj))
            if pending and time.monotonic() - flushed >= flush_seconds:
                _flush(cluster, run, pending, tally, reached, client=client, owners=owners)
                pending, flushed = [], time.monotonic()
            if stop():
                break
        _flush(cluster, run, pending, tally, reached, client=client, owners=owners)
        expired = bool(error and tally.counts.get("expired"))
        failed = bool(error) and not expired and not tally.counts["events"]
        runs.append(_close(run, tally, cursor="" if expired else reached, error=error, failed=failed))
        progress(f"watch ended after {tally.counts['events']} events at resourceVersion {reached}: {error or 'ok'}")
        cursor = "" if expired else reached
        if error and not expired:
            pause = time.monotonic() + min(30.0, flush_seconds)  # dropped or unreachable: a short pause, then again
            while time.monotonic() < pause and not stop():
                time.sleep(0.2)
    return runs


_END = object()
STOP_POLL_SECONDS = 0.1
"""How often the watch loop looks at its stop flag while no event comes (an empty queue wait is nearly free)."""


def _reader(client: KueueClient, cursor: str, timeout_seconds: int) -> queue.Queue[Any]:
    """The watch read on a daemon thread into a queue (events, then the error or ``_END``), so the
    loop above can flush on a timer and stop at once: a read blocked on a quiet watch never holds it."""
    out: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for event in client.watch_workloads(cursor, timeout_seconds=timeout_seconds):
                out.put(event)
        except ClusterCallError as exc:
            out.put(exc)
        except Exception as exc:
            out.put(ClusterCallError(0, "Failed", f"the watch failed: {exc}"))
        out.put(_END)

    threading.Thread(target=read, name="allot-kueue-watch", daemon=True).start()
    return out


def _flush(
    cluster: Cluster,
    run: SourceRun,
    events: list[tuple[str, dict[str, Any]]],
    tally: _Tally,
    cursor: str,
    *,
    client: KueueClient | None = None,
    owners: OwnerCache | None = None,
) -> None:
    """Fold a batch of events and move the run's cursor with them, in one transaction: a crash
    after it resumes from here, before it re-reads the batch (folding an event twice changes nothing)."""
    with transaction.atomic():
        if events:
            _fold(cluster, run, events, tally, timezone.now(), client=client, owners=owners)
        SourceRun.objects.filter(pk=run.pk).update(
            cursor=cursor, counts={**tally.counts}, watermark=timezone.now(), status=SourceStatus.RUNNING
        )


def _fold(
    cluster: Cluster,
    run: SourceRun,
    events: Iterable[tuple[str, dict[str, Any]]],
    tally: _Tally,
    now: datetime,
    *,
    client: KueueClient | None = None,
    owners: OwnerCache | None = None,
) -> None:
    """Fold events into the records of their Workloads: read the batch's records once, fold every
    event in order, write each changed record once. A Workload without owner, project or tier
    (Kueue copies a job's labels only with ``integrations.labelKeysToCopy``) takes them from the job
    its controller ownerReference names, read once per job."""
    events = list(events)
    uids = {str((obj.get("metadata") or {}).get("uid") or "") for _, obj in events}
    records = {r.scheduler_id: r for r in WorkloadRecord.objects.filter(cluster=cluster, scheduler_id__in=uids)}
    tracks: dict[str, WorkloadTrack] = {
        uid: track_from_json(r.track) for uid, r in records.items() if r.track is not None
    }
    changed: set[str] = set()
    table = settings.ALLOT_ACCELERATORS
    owners = {} if owners is None else owners
    if len(owners) > OWNER_CACHE_SIZE:  # bounded: a long watch forgets the oldest jobs first
        for key in list(owners)[: len(owners) - OWNER_CACHE_SIZE // 2]:
            del owners[key]
    for kind, obj in events:
        tally.add("events")
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        where = f"{kind} {meta.get('namespace', '')}/{meta.get('name', '')}"
        deleted = kind == "DELETED"
        if MULTIKUEUE_ORIGIN in (meta.get("labels") or {}):  # a MultiKueue manager's copy: charged there, once
            tally.add("mirrored_from_manager")
            continue
        try:
            track = observe(tracks.get(uid), obj, accelerators=table, seen_at=now, deleted=deleted)
        except WorkloadError as exc:
            tally.problem(where, str(exc))
            continue
        track = _from_owner(track, obj, client, owners, tally)
        if tracks.get(uid) != track:
            tracks[uid] = track
            changed.add(uid)
    if not changed:
        return
    maps = _Maps(
        dict(NamespaceBinding.objects.filter(cluster=cluster).values_list("namespace", "unit_id")),
        _flavors(cluster),
        {priority_class_name(name): name for name in WorkloadTier.objects.values_list("name", flat=True)},
    )  # once per batch, not per Workload
    for uid in sorted(changed):
        _write(cluster, run, records.get(uid), tracks[uid], tally, maps)
    tally.add("workloads", len(changed))


def _flavors(cluster: Cluster) -> dict[str, ResourceFlavor]:
    """Flavor name → flavor. A MultiKueue manager has none of its own: its Workloads (the ones charged, their
    copies on the workers are not) are admitted to flavors named as the workers', the first worker's in the
    fleet's order standing for the name."""
    from quotas.models import Fleet

    found = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster)}
    fleet = Fleet.objects.filter(manager=cluster).first()
    if fleet is not None:  # one query; the first worker's last, so it wins a shared name
        workers = ResourceFlavor.objects.filter(cluster__fleet_worker__fleet=fleet)
        found.update({f.name: f for f in workers.order_by("-cluster__fleet_worker__position")})
    return found


OwnerCache = dict[tuple[str, str, str, str], dict[str, str] | None]
"""(namespace, kind, name, uid) of an owning job → its labels (None: gone or unreadable)."""
OWNER_CACHE_SIZE = 20_000


def _from_owner(
    track: WorkloadTrack,
    obj: dict[str, Any],
    client: KueueClient | None,
    owners: OwnerCache,
    tally: _Tally,
) -> WorkloadTrack:
    ref = controller_of(obj)
    labelled_tier = bool(track.tier) and not track.tier.startswith("allot-")  # not just a priority class's name
    if client is None or ref is None or (track.owner and track.project and labelled_tier):
        return track
    key = (track.namespace, str(ref.get("kind")), str(ref.get("name")), str(ref.get("uid") or ""))
    if key not in owners:
        try:
            owners[key] = client.owner_labels(track.namespace, ref)
        except ClusterCallError as exc:
            tally.problem(f"{key[1]} {track.namespace}/{key[2]}", f"its labels could not be read: {exc}")
            owners[key] = None
        tally.add("owner_lookups")
    labels = owners[key] or {}
    return replace(
        track,
        owner=track.owner or labels.get(LABEL_OWNER, ""),
        project=track.project or labels.get(LABEL_PROJECT, ""),
        tier=labels.get(LABEL_TIER) or track.tier,
    )


@dataclass(frozen=True)
class _Maps:
    units: dict[str, int]
    """Namespace → the unit it is bound to."""
    flavors: dict[str, ResourceFlavor]
    tiers: dict[str, str] = field(default_factory=dict)
    """WorkloadPriorityClass name (``allot-p1``) → tier name (``P1``)."""


def _write(
    cluster: Cluster, run: SourceRun, record: WorkloadRecord | None, track: WorkloadTrack, tally: _Tally, maps: _Maps
) -> None:
    unit_id = maps.units.get(track.namespace)
    if unit_id is None:
        tally.add("unresolved_namespace")
        tally.unresolved.add(track.namespace)
    flavor = maps.flavors.get(track.flavor) if track.flavor else None
    if track.devices and track.flavor and flavor is None:
        tally.add("unresolved_flavor")
    record = record or WorkloadRecord(cluster=cluster, scheduler_id=track.uid)
    before = {a.start: a.borrowed for a in record.allocations.all()} if record.pk else {}
    record.job_id = f"{track.namespace}/{track.name}"[:64]
    record.unit_id = unit_id
    record.account = track.namespace
    record.owner, record.project = track.owner, track.project
    record.tier = maps.tiers.get(track.tier, track.tier)  # a WorkloadPriorityClass name → its tier
    record.flavor, record.flavor_name = flavor, track.flavor
    record.devices = track.devices
    record.equivalents = held(track.resources, flavor.sharing_spec) if flavor is not None else None
    record.resources = {**track.resources, "queue": track.queue, "clusterQueue": track.cluster_queue}
    record.submitted_at, record.admitted_at, record.ended_at = track.created, track.admitted, track.ended
    record.state = track.state.value
    record.evictions = [
        {"reason": e.reason, "at": e.at.isoformat() if e.at else None, "message": e.message} for e in track.evictions
    ]
    record.held_seconds = track.held_seconds
    record.source_run = run
    record.track = track_to_json(track)
    allocations = []
    for part in track.runs:
        if not part.devices:
            continue
        # each admission period on the flavor it was admitted on (a Workload preempted on one flavor
        # may come back on another), its borrowed part against that flavor's guarantee
        on = maps.flavors.get(part.flavor) if part.flavor else flavor
        if part.flavor and on is None:
            tally.add("unresolved_flavor")
        weighs = share(held(track.resources, on.sharing_spec), track.devices, part.devices) if on else None
        borrowed = before.get(part.start)
        if borrowed is None:
            borrowed = _borrowed(unit_id, on, part.start, part.devices, weighs, exclude=record.pk)
        allocations.append((part, on, borrowed, weighs))
    record.borrowed = allocations[0][2] if allocations else 0
    evicted = {e.reason for e in track.evictions} | {"readmitted"}
    record.save()
    Allocation.objects.filter(record=record).delete()
    Allocation.objects.bulk_create(
        [
            Allocation(
                record=record,
                unit_id=unit_id,
                flavor=on,
                devices=part.devices,
                equivalents=weighs,
                borrowed=borrowed,
                start=part.start,
                end=part.end,
                run_key=f"{part.start:%Y-%m-%dT%H:%M:%S}",
                raw_state=_raw_state(part, evicted),
                submitted_at=track.created,
            )
            for part, on, borrowed, weighs in allocations
        ]
    )
    tally.add("allocations", len(allocations))


def _raw_state(part: Run, evicted: set[str]) -> str:
    """How a run ended, in words the rollups read: ``evicted <reason>`` when an eviction ended it (it
    lost the work since its last checkpoint), else Kueue's own word (Finished, Deleted…)."""
    words = f"evicted {part.ended_by}" if part.ended_by in evicted else part.ended_by
    return f"reconstructed {words}" if part.reconstructed else words


def _borrowed(
    unit_id: int | None,
    flavor: ResourceFlavor | None,
    start: datetime,
    devices: int,
    equivalents: float | None,
    exclude: int | None,
) -> int:
    """Devices (slices) of this run above the unit's guarantee at its start, counting what the unit already
    held on the flavor then — in GPU-equivalents on a shared flavor (``equivalents``: what the run weighs)."""
    if unit_id is None or flavor is None:
        return 0
    quota = Quota.objects.filter(unit_id=unit_id, flavor=flavor, resource=GPU).values_list("guarantee", flat=True)
    guarantee = quota.first() or 0
    before = (
        Allocation.objects.filter(unit_id=unit_id, flavor=flavor, start__lte=start)
        .filter(Q(end__isnull=True) | Q(end__gt=start))
        .exclude(record_id=exclude)
        .aggregate(n=Sum(HELD))["n"]
        or 0
    )
    weighs = float(devices) if equivalents is None else equivalents
    above = max(0.0, min(weighs, before + weighs - guarantee))
    return min(devices, ceil(above / weighs * devices - 1e-9)) if weighs else 0
