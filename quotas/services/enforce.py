"""Edits take effect by themselves: when a transaction that changed the policy commits, each enabled
cluster gets a sync (and, for Slurm, the job_submit snapshot is published again), debounced.

:func:`enforce_soon` hears every ``audit_write`` (the ``audit_written`` signal, connected in
``quotas.apps``); for rows that change the policy (``POLICY_ACTIONS``) it registers one ``on_commit``
callback that, per enabled cluster, sets a pending mark in the cache and — only if the mark was not
already set — sends :data:`enforcement_due`, on which ``quotas.tasks`` queues ``enforce_cluster`` after
``ALLOT_ENFORCE_DELAY_SECONDS`` (services never import tasks). A burst of edits (a bulk
change, a lead saving twice) is one run per cluster; the task clears the mark first, so an edit made
while it runs queues the next. The task takes a per-cluster lock: one run per cluster at a time.

Marks and locks live in the cache, which must be shared by every process of every machine (web,
worker, beat): settings refuse to start with enforcement on and no shared cache (``ALLOT_CACHE_URL``,
Redis by default). A lock holds a token and is released only while it is still the holder's, so a
run that outlived its lock never frees the lock of the run that took over. The lock is a lease of
``ALLOT_ENFORCE_LEASE_SECONDS`` that a live run renews (for at most ``ALLOT_ENFORCE_LOCK_SECONDS``): a
worker killed mid-run stops renewing it, so its cluster is free again within the lease, not after the
longest run allowed, and the runs queued meanwhile (retrying while busy) go ahead.

The run is the change's enforcement: its ``revision`` is the newest audit row it compiled, so the
history links each change to the first run of each cluster whose revision covers it
(:func:`enforced_by`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from uuid import uuid4

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.dispatch import Signal

from quotas.models import AuditEvent, Cluster, ClusterKind, SyncMode, SyncRun

POLICY_ACTIONS = frozenset(
    {
        "quota_set",
        "org_unit_create",
        "org_unit_update",
        "org_unit_move",
        "org_unit_archive",
        "org_unit_unarchive",
        "namespace_bind",
        "namespace_unbind",
        "membership_add",
        "membership_remove",
        "tier_set",
        "contract_set",
        "flavor_set",
        "fleet_set",
        "cluster_set",
        "reservation_set",
        "reservation_delete",
        "budget_set",
        "budget_delete",
        "budget_exhausted",
        "budget_released",
    }
)
PENDING = "allot:enforce:pending:{}"
log = logging.getLogger(__name__)
RUNNING = "allot:enforce:running:{}"
enforcement_due = Signal()
"""Sent with ``cluster_id`` and ``countdown`` when a cluster should be enforced (quotas.tasks queues it)."""


def enforce_soon(events: Iterable[AuditEvent], **_: Any) -> None:
    """After the current transaction commits, queue a debounced enforcement of every enabled cluster
    if any of ``events`` changed the policy. Does nothing when ``ALLOT_ENFORCE_ON_CHANGE`` is off."""
    if not settings.ALLOT_ENFORCE_ON_CHANGE or not any(e.action in POLICY_ACTIONS for e in events):
        return
    transaction.on_commit(_queue)


def enforce_clusters_soon(cluster_ids: Iterable[int]) -> None:
    """After commit, a debounced enforcement of these clusters: what they enforce moved without a
    policy edit (a budget's Slurm minutes follow its spend)."""
    ids = set(cluster_ids)
    if settings.ALLOT_ENFORCE_ON_CHANGE and ids:
        transaction.on_commit(lambda: _queue(ids))


def _queue(only: set[int] | None = None) -> None:
    delay = settings.ALLOT_ENFORCE_DELAY_SECONDS
    for cluster_id in Cluster.objects.filter(enabled=True).values_list("pk", flat=True):
        if only is not None and cluster_id not in only:
            continue
        if cache.add(PENDING.format(cluster_id), 1, timeout=max(60, delay * 10)):
            enforcement_due.send(sender=Cluster, cluster_id=cluster_id, countdown=delay)


def cluster_enforce(*, cluster: Cluster) -> dict[str, Any]:
    """Sync ``cluster`` with the policy now (apply), and for Slurm publish the submission snapshot to
    ``ALLOT_SLURM_POLICY_OUT`` (``{cluster}`` is the cluster's name) when it is set. Returns what was
    done; ``busy`` when another enforcement of the cluster holds the lock (the caller retries)."""
    from quotas.services.slurm_policy import slurm_policy_publish
    from quotas.services.sync import cluster_sync

    lock, token = RUNNING.format(cluster.pk), uuid4().hex
    if not cache.add(lock, token, timeout=settings.ALLOT_ENFORCE_LEASE_SECONDS):
        return {"busy": True}
    done_renewing = _renew_while_running(lock, token)
    try:
        cache.delete(PENDING.format(cluster.pk))  # an edit from now on queues the next run
        run = cluster_sync(actor=None, reason="enforce the policy after a change", cluster=cluster, mode=SyncMode.APPLY)
        done: dict[str, Any] = {"run": run.pk, "status": run.status, "revision": run.revision}
        if cluster.kind == ClusterKind.SLURM and settings.ALLOT_SLURM_POLICY_OUT:
            try:
                policy = slurm_policy_publish(cluster=cluster, out=policy_out(cluster))
                done["published"] = policy["version"]
                if policy.get("inventory_error"):  # published all the same; whole-node jobs are not counted
                    done["inventory_error"] = policy["inventory_error"]
                    log.warning("enforce %s: slurmctld's nodes not read: %s", cluster.name, policy["inventory_error"])
            except (ValueError, OSError) as exc:  # a cluster not set up yet, a path not writable: said, not raised
                done["publish_error"] = str(exc)
                log.error("enforce %s: the job_submit snapshot was not published: %s", cluster.name, exc)
        return done
    finally:
        done_renewing.set()
        if cache.get(lock) == token:  # still ours (it may have expired and been taken over)
            cache.delete(lock)


def _renew_while_running(lock: str, token: str) -> threading.Event:
    """Renew the lease every third of ALLOT_ENFORCE_LEASE_SECONDS on a daemon thread while the run lives
    (and it is still this run's), for at most ALLOT_ENFORCE_LOCK_SECONDS. Set the returned event to stop."""
    done, lease = threading.Event(), settings.ALLOT_ENFORCE_LEASE_SECONDS
    ends = time.monotonic() + settings.ALLOT_ENFORCE_LOCK_SECONDS

    def renew() -> None:
        while not done.wait(lease / 3) and time.monotonic() < ends:
            if cache.get(lock) != token or not cache.touch(lock, lease):
                return  # expired and taken over (or gone): never extend another run's lock

    threading.Thread(target=renew, name=f"allot-enforce-lease-{lock}", daemon=True).start()
    return done


def policy_out(cluster: Cluster) -> Path:
    """Where ``cluster``'s job_submit snapshot goes: ALLOT_SLURM_POLICY_OUT with ``{cluster}`` replaced.
    Without ``{cluster}`` every Slurm cluster would write the same file and each job_submit.lua would
    enforce whichever cluster synced last: refused (ValueError) while more than one Slurm cluster is
    enabled."""
    template = settings.ALLOT_SLURM_POLICY_OUT
    if "{cluster}" not in template:
        others = Cluster.objects.filter(kind=ClusterKind.SLURM, enabled=True).exclude(pk=cluster.pk)
        names = sorted(others.values_list("name", flat=True))
        if names:
            raise ValueError(
                f"ALLOT_SLURM_POLICY_OUT={template!r} has no {{cluster}} and Slurm clusters {cluster.name}, "
                f"{', '.join(names)} would overwrite each other's snapshot: put {{cluster}} in the path "
                f"(e.g. /etc/slurm/allot/{{cluster}}-policy)"
            )
    return Path(template.format(cluster=cluster.name))


def enforced_by(events: Iterable[AuditEvent]) -> dict[int, list[SyncRun]]:
    """Per audit row, the first applying sync run of each cluster that compiled it (one query)."""
    events = list(events)
    if not events:
        return {}
    runs = list(
        SyncRun.objects.filter(mode=SyncMode.APPLY, revision__gte=min(e.pk for e in events))
        .select_related("cluster")
        .order_by("revision", "id")
    )
    found: dict[int, list[SyncRun]] = {}
    for event in events:
        if event.action not in POLICY_ACTIONS:
            continue
        first: dict[int, SyncRun] = {}
        for run in runs:
            if run.revision >= event.pk and run.cluster_id not in first:
                first[run.cluster_id] = run
        found[event.pk] = sorted(first.values(), key=lambda r: r.cluster.name)
    return found
