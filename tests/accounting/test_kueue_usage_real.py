"""The usage watcher against a real API server and Kueue, with the shipped ClusterRole (issue #40.3)."""

from __future__ import annotations

import pytest

from accounting.models import WorkloadRecord
from accounting.services.kueue import usage_resync_kueue
from tests.kube_work import delete_jobs, gpu_job, wait_for, workloads
from tests.quotas.test_kube_real import demo_on_the_plane

pytestmark = [pytest.mark.kube, pytest.mark.django_db]


def test_the_watcher_reads_owner_and_project_from_the_owning_job_with_the_shipped_role(kube_plane, demo):
    """The Workload Kueue made carries no owner labels (the Job got them after: as on a Kueue without Allot's
    labelKeysToCopy); the watcher, as the shipped allot-sync identity, reads them from the Job (a 403 before)."""
    from quotas.services.sync import cluster_sync

    demo_on_the_plane(kube_plane, demo)
    cluster_sync(actor=None, reason="t", cluster=demo)
    job = gpu_job("owned", "speech", "acme.research.speech", 1, priority="allot-p1")
    try:
        kube_plane.apply_manifest(job)
        wait_for("Kueue made the Workload", lambda: workloads(kube_plane, "speech").get("owned"))
        labels = {"allot.dev/owner": "erin", "allot.dev/project": "speech", "allot.dev/tier": "P1"}
        kube_plane.request(
            "PATCH",
            "/apis/batch/v1/namespaces/speech/jobs/owned",
            {"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )
        run = usage_resync_kueue(cluster=demo)
        assert run.status != "failed", run.message
        uid = workloads(kube_plane, "speech")["owned"]["metadata"]["uid"]
        record = WorkloadRecord.objects.get(cluster=demo, scheduler_id=uid)
        assert (record.owner, record.project) == ("erin", "speech"), run.message
    finally:
        delete_jobs(kube_plane, "speech")
