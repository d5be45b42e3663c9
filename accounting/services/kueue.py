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
eviction seen; ``accounting.services.kueue_records`` writes it and its ``Allocation`` rows. Its unit comes
from the namespace binding; one in an unbound namespace is kept with no unit and counted.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounting.models import SourceKind, SourceRun, SourceStatus, WorkloadRecord
from accounting.policy.kueue import (
    LABEL_OWNER,
    LABEL_PROJECT,
    LABEL_TIER,
    MULTIKUEUE_ORIGIN,
    WorkloadError,
    WorkloadTrack,
    controller_of,
    observe,
)
from accounting.policy.kueue_track_json import track_from_json
from accounting.policy.sacct import EndState
from accounting.services.kueue_records import Maps, Tally, flavors_of, write_record
from quotas.integrations.kubernetes import ClusterCallError, KueueClient, api_client_for
from quotas.models import Cluster, ClusterKind, NamespaceBinding, WorkloadTier
from quotas.policy.kueue.target import priority_class_name


def kueue_client(cluster: Cluster) -> KueueClient:
    if cluster.kind != ClusterKind.KUBERNETES:
        raise ValueError(f"{cluster.name} is not a Kubernetes cluster")
    return KueueClient(api_client_for(cluster.connection_ref))


def _start(cluster: Cluster, name: str) -> SourceRun:
    now = timezone.now()
    return SourceRun.objects.create(
        source=SourceKind.KUEUE, cluster=cluster, name=name, started_at=now, window_start=now, window_end=now
    )


def _close(run: SourceRun, tally: Tally, *, cursor: str, error: str = "", failed: bool = False) -> SourceRun:
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
    tally = Tally()
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
        tally = Tally()
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
    tally: Tally,
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
    tally: Tally,
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
    maps = Maps(
        dict(NamespaceBinding.objects.filter(cluster=cluster).values_list("namespace", "unit_id")),
        flavors_of(cluster),
        {priority_class_name(name): name for name in WorkloadTier.objects.values_list("name", flat=True)},
    )  # once per batch, not per Workload
    for uid in sorted(changed):
        write_record(cluster, run, records.get(uid), tracks[uid], tally, maps)
    tally.add("workloads", len(changed))


OwnerCache = dict[tuple[str, str, str, str], dict[str, str] | None]
"""(namespace, kind, name, uid) of an owning job → its labels (None: gone or unreadable)."""
OWNER_CACHE_SIZE = 20_000


def _from_owner(
    track: WorkloadTrack,
    obj: dict[str, Any],
    client: KueueClient | None,
    owners: OwnerCache,
    tally: Tally,
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
