"""The fragmentation index sampled for real: Kubernetes Nodes and Pods listed through the official
client from the loopback API server (paged, as the real one pages them), the local Slurm stack's
nodes and pending jobs, and the finding when free-but-unusable capacity persists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounting.models import Finding, FragmentationSample
from accounting.services.findings import findings_detect
from accounting.services.fragmentation import fragmentation_sample, kube_cluster_inventory
from quotas import services
from quotas.integrations.kubernetes import KueueClient, api_client_for
from tests.accounting.policy.test_fragmentation import node, pod
from tests.kube_fake import FakeKueueServer
from tests.quotas.test_slurm_sync import lab as lab

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


@pytest.fixture
def labelled(org):
    services.flavor_set(
        actor=org.admin, reason="t", cluster=org.cluster, name="a100", accelerator_model="A100",
        device_memory_gb=80, physical_devices=120, node_labels={"gpu": "a100"},
    )  # fmt: skip
    return org


def test_a_kubernetes_clusters_nodes_and_pods_through_the_client(labelled, crd_schemas):
    org = labelled
    with FakeKueueServer(crd_schemas) as fake:
        fake.core["nodes"] = [node(f"n{i:02d}", 8, {"gpu": "a100"}) for i in range(15)] + [node("cpu-1", 0, {})]
        fake.core["pods"] = [pod(f"p{i}", 2, f"n{i:02d}") for i in range(15)]  # 2 of 8 held on every node
        fake.core["pods"] += [pod("done", 8, "n00", phase="Succeeded")]
        fake.core["pods"] += [
            pod(f"gang-{i}", 8, phase="Pending", owner="pretrain", selector={"gpu": "a100"}) for i in range(8)
        ]
        client = KueueClient(api_client_for(f"url:{fake.url}"))
        original = client.list_core
        client.list_core = lambda what, **kw: original(what, page=4, **kw)  # type: ignore[method-assign]  # pages
        (found,) = fragmentation_sample(cluster=org.cluster, at=NOW, read=lambda c: kube_cluster_inventory(c, client))
        pages = [p for m, p in fake.requests if p.startswith("/api/v1/pods")]
    assert len(pages) == 6 and "fieldSelector=status.phase%21%3DSucceeded" in pages[0]  # 23 pods, 4 a page
    assert (found.free, found.usable, found.largest_block, found.index) == (90, 0, 6, 1.0)
    assert found.waiting == ("team-a/pretrain: 8 × 8 GPUs",)
    sample = FragmentationSample.objects.get()
    assert (sample.free, sample.index, sample.waiting, sample.blocks) == (90, 1.0, list(found.waiting), {"6": 15})


def test_persistent_unusable_capacity_becomes_a_finding(
    labelled, client, settings, mailoutbox, django_capture_on_commit_callbacks
):
    org = labelled
    from quotas.models import ResourceFlavor

    settings.ALLOT_FINDINGS_OPERATOR_EMAILS = ["gpu-ops@example.org"]  # a fleet-wide finding has no unit's leads

    flavor = ResourceFlavor.objects.get(name="a100")
    for h in range(24):
        stuck = h >= 12  # the gang arrived at noon
        FragmentationSample.objects.create(
            flavor=flavor, at=NOW - timedelta(hours=24 - h), nodes=15, total=120, used=30, free=90,
            usable=0 if stuck else 90, index=1.0 if stuck else 0.0, largest_block=6, whole_free_nodes=0,
            pending_gpus=64 if stuck else 0, waiting=["team-a/pretrain: 8 × 8 GPUs"] if stuck else [],
        )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        findings_detect(end=NOW, now=NOW)
    finding = Finding.objects.get(kind="fragmentation")
    assert finding.flavor == flavor and finding.unit is None
    [mail] = [m for m in mailoutbox if "gpu-ops@example.org" in m.to]
    assert mail.subject.startswith("[Allot] fragmentation: west/a100: 90 GPUs free")
    assert finding.summary == (
        "west/a100: 90 GPUs free, 90 of them unusable by what waits (team-a/pretrain: 8 × 8 GPUs) — largest free "
        "block 6, in 12 of 24 hours"
    )
    assert "Not more hardware" in finding.suggestion and finding.evidence["hours_stuck"] == 12
    client.force_login(org.admin)
    assert "largest free block 6" in client.get("/findings/").content.decode()


@pytest.mark.slurm
def test_real_jobs_on_the_local_slurm_node_leave_free_but_unusable_gpus(lab):
    from accounting.services.fragmentation import slurm_inventory
    from tests.quotas.test_slurm_sync import _sh, _wait, node_to_ourselves

    node_to_ourselves()  # the node's 8 GPUs counted below are ours alone
    held = pending = None
    try:
        done = _sh("sbatch", "-A", "root", "--gres=gpu:a100:6", "-t", "5", "--chdir=/tmp", "-o", "/dev/null",
                   "--wrap", "sleep 300")  # fmt: skip
        assert done.returncode == 0, done.stderr
        held = done.stdout.split()[-1]
        assert _wait(held, {"RUNNING"}), "the 6-GPU job did not start"
        done = _sh("sbatch", "-A", "root", "--gres=gpu:a100:4", "-t", "5", "--chdir=/tmp", "-o", "/dev/null",
                   "--wrap", "sleep 1")  # fmt: skip
        assert done.returncode == 0, done.stderr
        pending = done.stdout.split()[-1]
        assert _wait(pending, {"PENDING"})
        nodes, shapes = slurm_inventory(lab.slurm)
        (a100,) = fragmentation_sample(cluster=lab.slurm, read=lambda c: (nodes, shapes))
    finally:
        for job in (held, pending):
            if job:
                _sh("scancel", job)
    assert [(n.flavor, n.total, n.used) for n in nodes if n.flavor == "a100"] == [("a100", 8, 6)]
    assert (a100.free, a100.usable, a100.largest_block, a100.index) == (2, 0, 2, 1.0)
    assert a100.waiting == (f"job {pending}: 4 GPUs",)
