"""Celery tasks of accounting: take ids, call one service, idempotent (a usage window read twice, or a
rollup rebuilt twice, writes the same rows)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from accounting.services import usage_ingest_dcgm, usage_ingest_slurm, usage_resync_kueue, usage_rollup
from accounting.services.findings import findings_detect
from accounting.services.kueue import kueue_client
from accounting.services.kueue_metrics import usage_ingest_kueue_metrics
from accounting.services.kueue_queues import queues_resync
from quotas.integrations.kubernetes import ClusterCallError
from quotas.models import Cluster, ClusterKind


@shared_task(name="accounting.tasks.ingest_slurm", autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3)
def ingest_slurm(cluster_id: int) -> dict[str, object]:
    """Ingest one Slurm cluster's jobs from its last watermark. Slurm's failures are recorded on the
    source run, not raised; only database trouble is retried."""
    run = usage_ingest_slurm(cluster=Cluster.objects.get(pk=cluster_id))
    return {"run": run.pk, "status": run.status, "counts": run.counts}


@shared_task(name="accounting.tasks.ingest_all_slurm")
def ingest_all_slurm() -> list[int]:
    """From beat: queue an ingest of every enabled Slurm cluster."""
    ids = list(Cluster.objects.filter(kind=ClusterKind.SLURM, enabled=True).values_list("pk", flat=True))
    for cluster_id in ids:
        ingest_slurm.delay(cluster_id)
    return ids


@shared_task(name="accounting.tasks.resync_kueue", autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3)
def resync_kueue(cluster_id: int) -> dict[str, object]:
    """List one Kubernetes cluster's Workloads and fold each into its record. An unreachable cluster
    is recorded on the source run, not raised."""
    cluster = Cluster.objects.get(pk=cluster_id)
    run = usage_resync_kueue(cluster=cluster)
    try:  # the ClusterQueues' own figures for the waiting answers (accounting.services.kueue_queues)
        queues, _ = queues_resync(cluster=cluster, client=kueue_client(cluster))
    except (ClusterCallError, ValueError) as exc:
        return {"run": run.pk, "status": run.status, "counts": run.counts, "queues": f"not read: {exc}"}
    return {"run": run.pk, "status": run.status, "counts": run.counts, "queues": queues}


@shared_task(name="accounting.tasks.resync_all_kueue")
def resync_all_kueue() -> list[int]:
    """From beat: queue a resync of every enabled Kubernetes cluster that has a connection."""
    clusters = Cluster.objects.filter(kind=ClusterKind.KUBERNETES, enabled=True).exclude(connection_ref="")
    ids = list(clusters.values_list("pk", flat=True))
    for cluster_id in ids:
        resync_kueue.delay(cluster_id)
    return ids


@shared_task(name="accounting.tasks.ingest_dcgm", autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3)
def ingest_dcgm(cluster_id: int) -> dict[str, object]:
    """Read one cluster's GPU activity from its Prometheus. Prometheus's failures are recorded on the
    source run, not raised."""
    run = usage_ingest_dcgm(cluster=Cluster.objects.get(pk=cluster_id))
    return {"run": run.pk, "status": run.status, "counts": run.counts}


@shared_task(
    name="accounting.tasks.ingest_kueue_metrics", autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3
)
def ingest_kueue_metrics(cluster_id: int) -> dict[str, object]:
    """Read one Kubernetes cluster's Kueue queue metrics from its Prometheus (the cross-check's other side)."""
    run = usage_ingest_kueue_metrics(cluster=Cluster.objects.get(pk=cluster_id))
    return {"run": run.pk, "status": run.status, "counts": run.counts}


@shared_task(name="accounting.tasks.ingest_all_dcgm")
def ingest_all_dcgm() -> list[int]:
    """From beat: queue a DCGM read of every enabled cluster ALLOT_DCGM_PROMETHEUS names, and on the
    Kubernetes ones a read of Kueue's queue metrics from the same Prometheus."""
    names = list(settings.ALLOT_DCGM_PROMETHEUS)
    clusters = list(Cluster.objects.filter(name__in=names, enabled=True).values_list("pk", "kind"))
    for cluster_id, kind in clusters:
        ingest_dcgm.delay(cluster_id)
        if kind == ClusterKind.KUBERNETES:
            ingest_kueue_metrics.delay(cluster_id)
    return [cluster_id for cluster_id, _ in clusters]


@shared_task(name="accounting.tasks.rollup_recent")
def rollup_recent(hours: int = 48) -> int:
    """From beat: rebuild the rollups of the last ``hours`` (late and corrected records land there)."""
    now = timezone.now()
    rows = usage_rollup(start=now - timedelta(hours=hours), end=now + timedelta(hours=1), now=now)
    evaluate_budgets.delay()  # spend is read from the rollups just rebuilt
    return rows


@shared_task(
    name="accounting.tasks.evaluate_budgets", autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3
)
def evaluate_budgets() -> dict[str, object]:
    """After each rollup: every budget's spend this period; a budget running out (or released) is
    audited, which enforces it on the clusters (quotas.services.enforce); then the budget findings
    (warned, forecast to run out, spent) are opened and mailed, or resolved."""
    from accounting.services.budgets import budget_findings_detect, budgets_evaluate

    counts = budgets_evaluate()
    return {**counts, "findings": budget_findings_detect()}


@shared_task(name="accounting.tasks.sample_fragmentation")
def sample_fragmentation() -> dict[str, object]:
    """From beat, hourly: every reachable cluster's node inventory against its pending work (the
    fragmentation index per flavor); a cluster that does not answer is reported, not retried."""
    from accounting.services.fragmentation import fragmentation_sample_all

    return fragmentation_sample_all()


@shared_task(name="accounting.tasks.detect_findings")
def detect_findings() -> dict[str, object]:
    """From beat: run the detectors over the windows ending now and reconcile the findings."""
    return findings_detect().as_dict()


@shared_task(name="accounting.tasks.build_reviews")
def build_reviews(month: str = "") -> list[int]:
    """From beat, on the 1st: last month's review of every organisation and department, built once (a
    rerun or a redelivered task returns the reviews built already; never a second version)."""
    from accounting.services.review import last_month, review_once
    from quotas.models import OrgUnit

    month = month or last_month()
    built = []
    for unit in OrgUnit.objects.filter(depth__lte=1, archived_at__isnull=True).order_by("path"):
        built.append(review_once(unit=unit, month=month).pk)
    return built


@shared_task(name="accounting.tasks.build_review", bind=True)
def build_review(self: Any, unit_id: int, month: str) -> int:
    """One review, on request from the portal or the API; its progress is the task's state."""
    from accounting.services.review import review_generate
    from quotas.models import OrgUnit

    self.update_state(state="PROGRESS", meta={"step": "reading the month"})
    return int(review_generate(unit=OrgUnit.objects.get(pk=unit_id), month=month).pk)
