"""Waiting, explained, on a real Kueue (issue #44.6): the watcher's live view, the explanation naming the real
cause, and each way out, applied, making the job run."""

from __future__ import annotations

import pytest

from accounting.services.kueue import usage_resync_kueue
from accounting.services.waiting import explain_record, find_waiting, unit_waiting
from quotas.models import Cluster, NamespaceBinding, SyncStatus
from quotas.services.sync import cluster_sync
from tests.kube_work import admitted, condition, delete_jobs, gpu_job, wait_for, workloads
from tests.quotas.test_kube_real import active, demo_on_the_plane

pytestmark = [pytest.mark.kube, pytest.mark.django_db]


def test_a_job_beyond_its_units_ceiling_is_explained_and_each_way_out_makes_it_run(kube_plane, demo):
    from admission.selectors import admission_policy

    demo_on_the_plane(kube_plane, demo)
    run = cluster_sync(actor=None, reason="t", cluster=demo)
    assert run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), run.message
    policy = admission_policy(Cluster.objects.get(pk=demo.pk))
    labels = {f.name: dict(f.node_labels) for f in policy.flavors}
    ns = "speech"
    rule = policy.namespaces[ns]
    active(kube_plane, [rule.queue])
    full, other = sorted((c, f) for f, c in rule.ceilings.items() if c)[:2]
    ceiling, flavor = full
    try:
        kube_plane.apply_manifest(gpu_job("first", ns, rule.queue, ceiling, node_selector=labels[flavor]))
        wait_for("first admitted at the ceiling", lambda: admitted(workloads(kube_plane, ns).get("first")))
        kube_plane.apply_manifest(gpu_job("second", ns, rule.queue, 1, node_selector=labels[flavor]))
        said = wait_for(
            "Kueue's word on second",
            lambda: (condition(workloads(kube_plane, ns).get("second"), "QuotaReserved") or {}).get("message"),
        )
        resync = usage_resync_kueue(cluster=demo)
        assert resync.status != "failed", resync.message
        record = find_waiting(demo, ns, "job/second")
        assert record is not None and record.state == "pending"
        answer = explain_record(record)
        found = answer.explanation
        first = workloads(kube_plane, ns)["first"]["metadata"]["name"]
        top = found.top
        assert top is not None and top.code == "borrowing-limit", found.causes
        assert f"{ns}/{first} ({ceiling} devices" in " ".join(top.evidence)
        assert said in found.scheduler_says and answer.age_s is not None and answer.age_s >= 0
        ways = {w.kind: (w, problem) for w, problem in answer.ways_out}
        assert "wait-finish" in ways and first in ways["wait-finish"][0].text
        assert ways["other-flavor"][0].flavor == f"{demo.name}/{other[1]}", ways
        # the way out to another flavor, taken: the same job pinned there runs
        kube_plane.apply_manifest(gpu_job("moved", ns, rule.queue, 1, node_selector=labels[other[1]]))
        wait_for("the job moved to the other flavor runs", lambda: admitted(workloads(kube_plane, ns).get("moved")))
        # waiting for its own work to finish, taken: first goes, second runs
        kube_plane.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/first", {"propagationPolicy": "Background"})
        kube_plane.delete(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads/{first}")
        wait_for("second runs once first is gone", lambda: admitted(workloads(kube_plane, ns).get("second")), 60)
        usage_resync_kueue(cluster=demo)
        unit = NamespaceBinding.objects.get(cluster=demo, namespace=ns).unit_id
        assert [a.record.job_id for a in unit_waiting([unit])] == []
    finally:
        delete_jobs(kube_plane, ns)
