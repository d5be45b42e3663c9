"""MIG slices and shared GPUs on the real Kueue (issue #45.3, 45.6): the compiled queues cover one currency,
``allot.dev/gpu-equivalent-millionths``, that the cluster's Kueue configuration transforms every slice into (as Allot
serves it), so slices are admitted and refused by weight — and exactly where the admission webhook, judging
the same tree, allows and refuses them."""

from __future__ import annotations

import pytest

from admission.policy.decide import Reason, decide
from admission.policy.model import compile_policy
from admission.policy.review import Decision
from quotas.policy import Resource
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.sharing import EQUIVALENTS
from quotas.policy.snapshot import Contract, Tier, UnitKind
from tests.kube_cluster import SHARED_FLAVORS
from tests.kube_work import admitted, condition, delete_jobs, gpu_job, namespace, wait_for, workloads
from tests.quotas.test_kube_real import active, apply_tree

pytestmark = pytest.mark.kube
GPU = Resource.GPU
ORG = "slices"
LABELS = {
    "allot.dev/owner": "ann",
    "allot.dev/project": "infer",
    "allot.dev/tier": "P1",
    "allot.dev/contract": "std",
}


def tree():
    """slices (8 a100, 2 h100-mig, 1 gpu-shared) → infer (1 GPU-equivalent of MIG slices, burst 0; 1 of
    time-sliced shares), train (8 a100)."""
    b = TreeBuilder()
    b.flavor("kube/a100", 8)
    b.flavor("kube/h100-mig", 2)
    b.flavor("kube/gpu-shared", 1)
    b.contracts["std"] = Contract("std", 300, 30)
    b.tiers["P1"] = Tier("P1", 10000, False)
    root = b.unit(ORG, UnitKind.ORGANISATION, contract="std")
    infer = b.unit("infer", UnitKind.TEAM, root)
    train = b.unit("train", UnitKind.TEAM, root)
    for key, n in (("kube/a100", 8), ("kube/h100-mig", 2), ("kube/gpu-shared", 1)):
        b.quota(root, key, GPU, n)
    b.quota(infer, "kube/h100-mig", GPU, 1)
    b.quota(infer, "kube/gpu-shared", GPU, 1)
    b.quota(train, "kube/a100", GPU, 8)
    flavors = (
        KueueFlavor("kube/a100", "a100", {"gpu": "a100"}),
        KueueFlavor("kube/h100-mig", "h100-mig", {"gpu": "h100-mig"}, sharing=SHARED_FLAVORS["h100-mig"]),
        KueueFlavor("kube/gpu-shared", "gpu-shared", {"gpu": "t4-shared"}, sharing=SHARED_FLAVORS["gpu-shared"]),
    )
    namespaces = {infer: (f"{ORG}-infer",), train: (f"{ORG}-train",)}
    target = KueueTarget("kube", flavors, namespaces=namespaces)
    snapshot = b.build()
    policy = compile_policy(snapshot, target, members={infer: frozenset({"ann"})}, allowed_tiers={}, flavor_memory={})
    return compile_kueue(snapshot, target), policy


def slice_job(name: str, asks: dict[str, int], pods: int = 1, selector: dict[str, str] | None = None):
    job = gpu_job(name, f"{ORG}-infer", f"{ORG}.infer", 1, priority="allot-p1", node_selector=selector)
    job["metadata"]["labels"].update(LABELS)
    job["spec"]["parallelism"] = job["spec"]["completions"] = pods
    quantities = {k: str(v) for k, v in asks.items()}
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": quantities, "limits": quantities}
    return job


def mutated(policy, job):
    """The job as the mutating webhook sends it on (its patch applied)."""
    import jsonpatch

    decision = decide(policy, _request(job), mutate=True)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(job, list(decision.patch))


def _request(job):
    return {
        "uid": "u",
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "namespace": job["metadata"]["namespace"],
        "operation": "CREATE",
        "object": job,
    }


def webhook_allows(policy, job) -> tuple[bool, Decision]:
    decision = decide(policy, _request(job))
    return decision.allowed, decision


def pending_for_quota(plane, ns, name):
    wl = workloads(plane, ns).get(name)
    message = (condition(wl, "QuotaReserved") or {}).get("message", "")
    return not admitted(wl) and "insufficient" in message and message


def test_slices_are_admitted_by_weight_as_the_webhook_judges_them(kube_plane):
    objects, policy = tree()
    for team in ("infer", "train"):
        namespace(kube_plane, f"{ORG}-{team}")
    apply_tree(kube_plane, objects)
    active(kube_plane, [f"{ORG}.infer", f"{ORG}.train"])
    ns = f"{ORG}-infer"
    mig = {"gpu": "h100-mig"}
    try:
        # seven 1g.10gb slices weigh 7 × 1/7 = one GPU-equivalent: the ceiling, admitted
        seven = slice_job("seven", {"nvidia.com/mig-1g.10gb": 1}, pods=7, selector=mig)
        assert webhook_allows(policy, seven)[0]
        kube_plane.apply_manifest(seven)
        wl = wait_for(
            "seven slices admitted", lambda: (w := workloads(kube_plane, ns).get("seven")) and admitted(w) and w
        )
        [assignment] = wl["status"]["admission"]["podSetAssignments"]
        assert assignment["flavors"] == {EQUIVALENTS: "h100-mig"}
        assert assignment["resourceUsage"] == {EQUIVALENTS: "999999"}  # 7 × 142857, Kueue's own arithmetic
        # one more slice of any profile is above the equivalent: Kueue keeps it waiting on the currency
        one = slice_job("one-more", {"nvidia.com/mig-1g.10gb": 1}, selector=mig)
        kube_plane.apply_manifest(one)
        message = wait_for("one more slice waits", lambda: pending_for_quota(kube_plane, ns, "one-more"))
        assert EQUIVALENTS in message, message
        # the seven finish: the waiting slice runs
        kube_plane.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/seven", {"propagationPolicy": "Background"})
        wait_for("the waiting slice admitted", lambda: admitted(workloads(kube_plane, ns).get("one-more")))
    finally:
        delete_jobs(kube_plane, ns)
    try:
        # a job that could never fit: the webhook refuses it, and Kueue never admits it either
        for name, asks, pods in (
            ("eight", {"nvidia.com/mig-1g.10gb": 1}, 8),  # 8/7
            ("three-halves", {"nvidia.com/mig-3g.40gb": 1}, 3),  # 3 × 1/2
            ("mixed", {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 1}, 1),  # 4/7 + 1/2
        ):
            job = slice_job(name, asks, pods=pods, selector=mig)
            allowed, decision = webhook_allows(policy, job)
            assert not allowed and decision.reason is Reason.EXCEEDS_CEILING, decision
            kube_plane.apply_manifest(job)
        for name in ("eight", "three-halves", "mixed"):
            wait_for(f"{name} never admitted", lambda name=name: pending_for_quota(kube_plane, ns, name))
        # exactly the ceiling in another profile: two 3g.40gb halves, admitted (the others still wait)
        halves = slice_job("two-halves", {"nvidia.com/mig-3g.40gb": 1}, pods=2, selector=mig)
        assert webhook_allows(policy, halves)[0]
        kube_plane.apply_manifest(halves)
        wait_for("two halves admitted", lambda: admitted(workloads(kube_plane, ns).get("two-halves")))
        assert not any(admitted(workloads(kube_plane, ns).get(n)) for n in ("eight", "three-halves", "mixed"))
    finally:
        delete_jobs(kube_plane, ns)


def test_time_sliced_shares_and_whole_gpus_on_a_shared_flavor(kube_plane):
    objects, policy = tree()
    for team in ("infer", "train"):
        namespace(kube_plane, f"{ORG}-{team}")
    apply_tree(kube_plane, objects)
    active(kube_plane, [f"{ORG}.infer"])
    ns = f"{ORG}-infer"
    try:
        # unpinned shares: the mutating webhook pins them to the flavor that offers them, or Kueue could
        # assign them to the MIG flavor (one currency) whose nodes have no shares
        four = mutated(policy, slice_job("four-shares", {"nvidia.com/gpu.shared": 1}, pods=4))  # 4 × 1/4
        assert four["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "t4-shared"}
        assert webhook_allows(policy, four)[0]
        kube_plane.apply_manifest(four)
        wl = wait_for(
            "four shares admitted", lambda: (w := workloads(kube_plane, ns).get("four-shares")) and admitted(w) and w
        )
        assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {EQUIVALENTS: "gpu-shared"}
        fifth = mutated(policy, slice_job("fifth-share", {"nvidia.com/gpu.shared": 1}))
        kube_plane.apply_manifest(fifth)
        wait_for("a fifth share waits", lambda: pending_for_quota(kube_plane, ns, "fifth-share"))
        # whole GPUs pinned to the MIG flavor's nodes: refused by the webhook (they offer only slices), and
        # Kueue would never admit them there (the flavor's nvidia.com/gpu quota is 0)
        whole = slice_job("whole", {"nvidia.com/gpu": 1}, selector={"gpu": "h100-mig"})
        allowed, decision = webhook_allows(policy, whole)
        assert not allowed and decision.reason is Reason.PIN_MISMATCH, decision  # the pin, not the profile
        assert "pin a flavor that offers it instead: a100 (gpu=a100)" in decision.message
        kube_plane.apply_manifest(whole)
        wait_for("whole GPUs never admitted on the MIG flavor", lambda: pending_for_quota(kube_plane, ns, "whole"))
    finally:
        delete_jobs(kube_plane, ns)


def mig_cluster(plane, org, suffix=""):
    """Through Allot's services: a cluster of its own on the plane (the shipped RBAC), an H100 MIG flavor, and
    migorg → migteam holding 1 GPU-equivalent of it, bound to namespace ``mig-sync<suffix>``. Names of its own:
    the plane is shared by the session's tests (the demo's acme is there)."""
    from quotas import services
    from quotas.models import ClusterKind
    from tests.quotas.test_kube_real import shipped_rbac

    shipped_rbac(plane)
    ns = f"mig-sync{suffix}"
    namespace(plane, ns)
    why = "slices"
    cluster = services.cluster_set(
        actor=org.admin,
        reason=why,
        name=f"mig-west{suffix}",
        kind=ClusterKind.KUBERNETES,
        connection_ref=f"kubeconfig:{plane.sync_kubeconfig}",
    )
    flavor = services.flavor_set(
        actor=org.admin,
        reason=why,
        cluster=cluster,
        name=f"h100-mig-sync{suffix}",
        accelerator_model="NVIDIA H100 80GB HBM3",
        device_memory_gb=80,
        physical_devices=2,
        sharing="mig",
        node_labels={"gpu": f"h100-mig-sync{suffix}"},
    )
    root = services.org_unit_create(
        actor=org.admin, reason=why, parent=None, kind="organisation", slug=f"migorg{suffix}", contract=org.contract
    )
    team = services.org_unit_create(actor=org.admin, reason=why, parent=root, kind="team", slug="migteam")
    for unit, g in ((root, 2), (team, 1)):
        services.quota_set_bulk(
            actor=org.admin, reason=why, changes=[services.QuotaChange(unit.pk, flavor.pk, GPU, g, 0, 0)]
        )
    services.namespace_bind(actor=org.admin, reason=why, unit=team, cluster=cluster, namespace=ns)
    return cluster, flavor, team, ns


@pytest.mark.django_db
def test_allots_sync_writes_a_mig_flavors_queues_and_a_second_sync_writes_nothing(kube_plane, org):
    """Through Allot's own sync (the shipped RBAC, server-side apply, the owned-field diff): the currency's
    quotas as the API server keeps them read back equal, and the run says whether the cluster's Kueue counts the
    slices by weight — read from its kueue-manager-config ConfigMap with the shipped RBAC."""
    from quotas.models import SyncStatus
    from quotas.services.sync import cluster_sync

    cluster, _, _, _ = mig_cluster(kube_plane, org)
    why = "slices"
    first = cluster_sync(actor=org.admin, reason=why, cluster=cluster)
    assert first.status == SyncStatus.APPLIED, first.message
    assert "shared flavor(s) h100-mig-sync: no Kueue configuration at kueue-system/kueue-manager-config" in (
        first.message
    )
    queue = kube_plane.get("/apis/kueue.x-k8s.io/v1beta1/clusterqueues/migorg.migteam")
    [group] = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", EQUIVALENTS]
    [entries] = [{r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]]
    assert entries == {"nvidia.com/gpu": "0", EQUIVALENTS: "1M"}
    second = cluster_sync(actor=org.admin, reason=why, cluster=cluster)
    written = [(o.kind, o.name, o.changes) for o in second.results.exclude(outcome="unchanged")]
    assert second.status == SyncStatus.IN_SYNC, (second.message, written)


@pytest.mark.django_db
def test_a_sync_reads_whether_the_clusters_kueue_counts_slices_by_weight(kube_plane, org):
    """Kueue's own configuration as a standard install keeps it (ConfigMap kueue-system/kueue-manager-config, key
    controller_manager_config.yaml), read by the sync with the shipped RBAC: Allot's served configuration counts
    the slices by weight; one without the 3g.40gb transformation does not, and the run names it and the fix."""
    import yaml

    from quotas.policy.kueue.config import kueue_configuration
    from quotas.selectors import shared_profiles
    from quotas.services.sync import cluster_sync

    cluster, _, _, _ = mig_cluster(kube_plane, org, suffix="-cfg")
    namespace(kube_plane, "kueue-system")
    served = kueue_configuration("classic", version="v1beta1", profiles=shared_profiles(cluster))

    def configure(config):
        kube_plane.apply_manifest({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": yaml.safe_dump(config)},
        })  # fmt: skip
        return cluster_sync(actor=org.admin, reason="t", cluster=cluster).message

    try:
        said = configure(served)
        assert "shared flavor(s) h100-mig-sync-cfg: this cluster's Kueue counts slices by weight" in said, said
        lacking = {**served, "resources": {"transformations": [
            t for t in served["resources"]["transformations"] if t["input"] != "nvidia.com/mig-3g.40gb"]}}  # fmt: skip
        said = configure(lacking)
        assert "this cluster's Kueue does not count slices by weight — in kueue-system/kueue-manager-config, " in said
        assert "nvidia.com/mig-3g.40gb is not transformed" in said and "nvidia.com/mig-1g.10gb" not in said
        assert "merge GET /api/v1/clusters/mig-west-cfg/kueue-config/ into it and restart Kueue" in said
    finally:
        kube_plane.delete("/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config")


@pytest.mark.django_db
def test_kueue_workloads_of_slices_are_charged_in_gpu_equivalents(kube_plane, org):
    """Issue #45.5 on the real Kueue: seven 1g.10gb slices admitted in Kueue's currency (999999 millionths) are
    recorded, through the usage source with the shipped RBAC, as 7 slices weighing exactly 1 GPU-equivalent —
    and charged as GPU-equivalent-hours by the rollup."""
    from datetime import timedelta

    from django.utils import timezone

    from accounting.models import Allocation, UsageHour, WorkloadRecord
    from accounting.services import usage_rollup
    from accounting.services.kueue import usage_resync_kueue
    from quotas.services.sync import cluster_sync

    cluster, flavor, team, ns = mig_cluster(kube_plane, org, suffix="-use")
    assert cluster_sync(actor=org.admin, reason="t", cluster=cluster).status == "applied"
    queue = "migorg-use.migteam"
    active(kube_plane, [queue])
    job = gpu_job("seven", ns, queue, 1, node_selector={"gpu": flavor.name})
    job["metadata"]["labels"].update(LABELS)
    job["spec"]["parallelism"] = job["spec"]["completions"] = 7
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/mig-1g.10gb": "1"},
        "limits": {"nvidia.com/mig-1g.10gb": "1"},
    }
    try:
        kube_plane.apply_manifest(job)
        wl = wait_for(
            "seven slices admitted", lambda: (w := workloads(kube_plane, ns).get("seven")) and admitted(w) and w
        )
        assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {EQUIVALENTS: "999999"}
        run = usage_resync_kueue(cluster=cluster)
        assert run.status == "ok", (run.message, run.problems)
        record = WorkloadRecord.objects.get(cluster=cluster, job_id=f"{ns}/{wl['metadata']['name']}")
        assert (record.unit_id, record.flavor_id, record.devices) == (team.pk, flavor.pk, 7)
        assert record.equivalents == 1.0  # 7 × 1/7 exactly, not Kueue's 0.999999
        assert record.resources["nvidia.com/mig-1g.10gb"] == "7" and record.resources[EQUIVALENTS] == "999999"
        [allocation] = Allocation.objects.filter(record=record)
        assert (allocation.devices, allocation.equivalents, allocation.borrowed) == (7, 1.0, 0)
        now = timezone.now()
        start = allocation.start.replace(minute=0, second=0, microsecond=0)
        usage_rollup(start=start, end=now + timedelta(hours=1), now=now)
        charged = sum(h.allocated for h in UsageHour.objects.filter(unit=team, flavor=flavor))
        assert charged == pytest.approx((now - allocation.start).total_seconds() / 3600, rel=1e-6)
    finally:
        delete_jobs(kube_plane, ns)
