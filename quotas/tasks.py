"""Celery tasks of the quotas app: take ids, load, call one function, idempotent."""

from __future__ import annotations

import logging
import math
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import OperationalError, transaction

from quotas.errors import InputError
from quotas.models import Cluster, ClusterKind, SyncMode
from quotas.policy.invariants import validate_tree
from quotas.selectors import org_snapshot
from quotas.services.audit import require_reason
from quotas.services.enforce import cluster_enforce
from quotas.services.sync import cluster_sync

log = logging.getLogger(__name__)


def cluster_sync_start(*, actor_id: int | None, cluster: Cluster, mode: str, reason: str) -> None:
    """Queue a run of ``cluster`` now, after the transaction commits, recorded as ``actor_id``'s: what the
    portal's buttons and POST /api/v1/clusters/NAME/sync/ both do. InputError (nothing queued) for a mode
    that is none of apply, dry_run and drift_check, a cluster switched off, or a missing reason."""
    if mode not in SyncMode.values:
        raise InputError(
            "mode", f"{mode!r} is no run Allot starts", "use apply, dry_run or drift_check: nothing started"
        )
    if not cluster.enabled:
        raise InputError(
            "cluster", f"{cluster.name} is not synced here (switched off)", "tick 'synced' in its settings first"
        )
    reason = require_reason(reason)
    transaction.on_commit(lambda: cluster_sync_task.delay(cluster.pk, mode, reason, actor_id))


@shared_task(name="quotas.tasks.cluster_sync", autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3)
def cluster_sync_task(
    cluster_id: int, mode: str = SyncMode.APPLY, reason: str = "scheduled sync", actor_id: int | None = None
) -> dict[str, object]:
    """Sync one cluster (idempotent: a second run writes nothing), recorded as ``actor_id``'s run (the
    person who started it in the portal or the API; None: the system's schedule). Cluster errors are
    recorded in the run, not raised; only database trouble is retried."""
    from django.contrib.auth import get_user_model

    cluster = Cluster.objects.get(pk=cluster_id)
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id is not None else None
    run = cluster_sync(actor=actor, reason=reason, cluster=cluster, mode=mode)
    return {"run": run.pk, "status": run.status, "counts": run.counts}


@shared_task(name="quotas.tasks.enforce_cluster", bind=True)
def enforce_cluster(self: Any, cluster_id: int) -> dict[str, object]:
    """Queued when a policy change commits (debounced per cluster): sync the cluster and publish its
    Slurm snapshot. One run per cluster at a time: a busy cluster is retried a little later, for as long
    as a run may hold the lock (ALLOT_ENFORCE_LOCK_SECONDS), so an edit made during a long run — or
    while a killed worker's lease runs out — is never given up on."""
    cluster = Cluster.objects.filter(pk=cluster_id, enabled=True).first()
    if cluster is None:
        return {"skipped": "cluster gone or disabled"}
    done = cluster_enforce(cluster=cluster)
    if done.get("busy"):
        countdown = settings.ALLOT_ENFORCE_DELAY_SECONDS or 5
        tries = math.ceil((settings.ALLOT_ENFORCE_LOCK_SECONDS + settings.ALLOT_ENFORCE_LEASE_SECONDS) / countdown)
        raise self.retry(countdown=countdown, max_retries=tries + 1)
    return done


def queue_enforcement(sender: Any, cluster_id: int, countdown: int, **_: Any) -> None:
    """quotas.services.enforce's ``enforcement_due``: queue the cluster's enforcement (connected in
    quotas.apps)."""
    enforce_cluster.apply_async((cluster_id,), countdown=countdown)


@shared_task(name="quotas.tasks.drift_check")
def drift_check(kind: str) -> list[int]:
    """From beat: queue a drift check of every enabled cluster of ``kind`` (kubernetes or slurm);
    each reports drift field by field, or corrects it when the cluster's drift policy says so."""
    ids = list(Cluster.objects.filter(kind=ClusterKind(kind), enabled=True).values_list("pk", flat=True))
    for cluster_id in ids:
        cluster_sync_task.delay(cluster_id, SyncMode.DRIFT_CHECK, "periodic drift check")
    return ids


@shared_task(name="quotas.tasks.policy_check")
def policy_check() -> dict[str, int]:
    """Validate the whole tree (hourly, from beat). Services refuse bad edits, so violations here
    mean something changed outside Allot (e.g. a database restore) and are logged as errors."""
    snapshot = org_snapshot()
    problems = validate_tree(snapshot)
    for problem in problems:
        log.error("policy violation %s: %s", problem.code, problem.message)
    return {"units": len(snapshot.units), "quotas": len(snapshot.quotas), "violations": len(problems)}
