"""Allot against a real kube-apiserver and a real Kueue scheduler (tests/kube_cluster.py; issue #39).

The control plane is Kueue's v0.13 line, which serves only ``kueue.x-k8s.io/v1beta1``: every sync here
also shows Allot speaking the version the cluster serves. Kueue runs with fair sharing on (the demo's
``fair`` clusters need it); each test uses queue names and namespaces of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from quotas.models import Cluster, DriftPolicy, NamespaceBinding, SyncStatus
from quotas.policy import Resource
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.kueue.convert import to_version
from quotas.policy.snapshot import Contract, Tier, UnitKind
from quotas.services.sync import cluster_sync
from tests.kube_cluster import SYNC_USER
from tests.kube_work import admitted, condition, delete_jobs, gpu_job, namespace, wait_for, workloads

pytestmark = pytest.mark.kube
REPO = Path(__file__).resolve().parents[2]
GPU = Resource.GPU


def shipped_rbac(plane) -> None:
    """deploy/kubernetes/base/rbac.yaml as shipped, bound to the identity the sync's kubeconfig uses."""
    namespace(plane, "allot-system")
    for doc in yaml.safe_load_all((REPO / "deploy/kubernetes/base/rbac.yaml").read_text()):
        if doc:
            plane.apply_manifest(doc)


def demo_on_the_plane(plane, demo) -> None:
    """The demo's k8s-west pointed at the control plane through the sync's own identity, with its namespaces."""
    shipped_rbac(plane)
    for ns in NamespaceBinding.objects.filter(cluster=demo).values_list("namespace", flat=True):
        namespace(plane, ns)
    demo.connection_ref = f"kubeconfig:{plane.sync_kubeconfig}"
    demo.save()


def apply_tree(plane, objects) -> None:
    """Compiled objects as the cluster serves them (v1beta1), applied by the admin (the scheduling tests)."""
    for obj in objects:
        plane.apply_manifest(to_version(obj, "v1beta1"))


def active(plane, queues):
    def check():
        found = plane.get("/apis/kueue.x-k8s.io/v1beta1/clusterqueues")["items"]
        ready = {
            q["metadata"]["name"]
            for q in found
            if any(c["type"] == "Active" and c["status"] == "True" for c in q.get("status", {}).get("conditions", []))
        }
        return set(queues) <= ready

    wait_for(f"ClusterQueues {sorted(queues)} active", check, 60)


# --- the sync, with the shipped RBAC, in the version the cluster serves -----------------------------------
@pytest.mark.django_db
def test_the_demo_syncs_to_a_v1beta1_kueue_with_the_shipped_rbac_and_a_second_sync_writes_nothing(kube_plane, demo):
    demo_on_the_plane(kube_plane, demo)

    run = cluster_sync(actor=None, reason="first contact", cluster=demo)
    # another test of the session may have synced the demo first: the objects are there either way
    assert run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), (
        run.message,
        list(run.results.values_list("name", "message")),
    )
    assert "objects written as v1beta1 — ClusterQueue spec.cohortName is written as spec.cohort" in run.message
    speech = kube_plane.get("/apis/kueue.x-k8s.io/v1beta1/clusterqueues/acme.research.speech")
    assert speech["spec"]["cohort"] == "acme.research" and "cohortName" not in speech["spec"]
    assert speech["spec"]["flavorFungibility"] == {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}
    assert speech["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert {m["manager"] for m in speech["metadata"]["managedFields"]} >= {"allot"}

    # every bound namespace is labelled for the admission webhooks' opt-in selector, by the sync's own role
    labels = kube_plane.get("/api/v1/namespaces/nlp")["metadata"]["labels"]
    assert labels["allot.dev/governed"] == "true" and labels["allot.dev/cluster"] == "k8s-west"

    again = cluster_sync(actor=None, reason="nothing changed", cluster=demo)
    assert again.status == SyncStatus.IN_SYNC, (again.message, list(again.results.values_list("name", "outcome")))

    # a person's edit on the server is drift, found field by field in the v1beta2 names Allot shows
    patch = {"spec": {"cohort": "acme.platform"}}
    kube_plane.request(
        "PATCH",
        "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/acme.research.speech?fieldManager=kubectl-edit",
        patch,
        content_type="application/merge-patch+json",
    )
    drift = cluster_sync(actor=None, reason="drift", cluster=demo, mode="drift_check")
    assert drift.status == SyncStatus.DRIFT, drift.message
    changed = drift.results.get(kind="ClusterQueue", name="acme.research.speech")
    assert [c["path"] for c in changed.changes] == ["spec.cohortName"]

    # the real API server's 409 on a field another manager took: Allot will not overwrite it, and says who
    dry = cluster_sync(actor=None, reason="dry", cluster=demo, mode="dry_run")
    assert dry.status == SyncStatus.PARTIAL, dry.message
    refused = dry.results.get(kind="ClusterQueue", name="acme.research.speech")
    assert refused.outcome == "drift" and "kubectl-edit" in refused.message, refused.message

    # under the correct drift policy Allot takes the field back (forced apply), and the queue is whole again
    demo.drift_policy = DriftPolicy.CORRECT
    demo.save()
    corrected = cluster_sync(actor=None, reason="correct", cluster=demo, mode="drift_check")
    assert corrected.status == SyncStatus.APPLIED, corrected.message
    speech = kube_plane.get("/apis/kueue.x-k8s.io/v1beta1/clusterqueues/acme.research.speech")
    assert speech["spec"]["cohort"] == "acme.research"


def test_the_shipped_role_cannot_write_what_allot_does_not_manage(kube_plane):
    """RBAC as the real API server applies it: the sync's identity may not create a Job or read Secrets."""
    shipped_rbac(kube_plane)

    def may(verb, group, resource):
        attributes = {"verb": verb, "group": group, "resource": resource}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": SYNC_USER, "groups": ["system:serviceaccounts"], "resourceAttributes": attributes},
        }
        return kube_plane.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"][
            "allowed"
        ]

    assert may("patch", "kueue.x-k8s.io", "clusterqueues")
    assert may("list", "kueue.x-k8s.io", "workloads")
    assert not may("create", "batch", "jobs")
    assert not may("get", "", "secrets")


# --- every ceiling is one Kueue can reach --------------------------------------------------------------
MAX_CAPACITY = re.compile(r"in flavor ([^,\s]+), request > maximum capacity \(\d+ > (\d+)\)")
"""Kueue's own words for a request that can never fit a flavor: "… insufficient quota for nvidia.com/gpu in flavor
a100-40gb, request > maximum capacity (86 > 85)"."""


@pytest.mark.django_db
def test_every_queue_and_flavor_of_the_demo_admits_exactly_what_the_webhook_allows(kube_plane, demo):
    """For every ClusterQueue and flavor of the demo: the webhook's ceiling = the most the real Kueue will ever
    admit there with the rest of the tree idle (issue #39.5). One more than the ceiling is never admitted
    (Kueue names its maximum capacity, which must equal the ceiling); exactly the ceiling is admitted."""
    from admission.selectors import admission_policy

    demo_on_the_plane(kube_plane, demo)
    run = cluster_sync(actor=None, reason="sweep", cluster=demo)
    assert run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), run.message
    policy = admission_policy(Cluster.objects.get(pk=demo.pk))
    flavors = {f.name: dict(f.node_labels) for f in policy.flavors}
    # one namespace per ClusterQueue
    per_queue: dict[str, tuple] = {}
    for ns, rule in sorted(policy.namespaces.items()):
        per_queue.setdefault(rule.queue, (ns, rule))
    active(kube_plane, list(per_queue))
    try:
        # one over the ceiling, every queue and flavor at once: none can ever be admitted, so they do not interfere
        for queue, (ns, rule) in per_queue.items():
            for flavor, ceiling in rule.ceilings.items():
                job = gpu_job(f"over-{flavor}", ns, queue, ceiling + 1, node_selector=flavors[flavor])
                kube_plane.apply_manifest(job)
        capacity, seen = {}, {}
        for queue, (ns, rule) in per_queue.items():

            def told(ns=ns, rule=rule):
                found = {}
                for name, wl in workloads(kube_plane, ns).items():
                    message = (condition(wl, "QuotaReserved") or {}).get("message", "")
                    seen[(ns, name)] = message
                    flavor = name.removeprefix("over-")
                    match = [m for m in MAX_CAPACITY.finditer(message) if m.group(1) == flavor]
                    if match:
                        found[flavor] = int(match[0].group(2))
                    assert not admitted(wl), (ns, name, "admitted above the ceiling")
                return found if set(found) == set(rule.ceilings) else None

            try:
                capacity[queue] = wait_for(f"Kueue's maximum capacity for {queue}", told, 60)
            except AssertionError:
                jobs = kube_plane.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
                wls = kube_plane.get(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads")["items"]
                raise AssertionError((ns, queue, seen, [j["metadata"]["name"] for j in jobs], wls[:1])) from None
        ceilings = {queue: dict(rule.ceilings) for queue, (_, rule) in per_queue.items()}
        assert capacity == ceilings
        assert ceilings["acme.research.nlp"]["h100-80gb"] == 28  # the tree says 40: its children keep 12
        assert ceilings["acme.research.nlp"]["a100-40gb"] == 94  # the tree says 135
    finally:
        for ns, _ in per_queue.values():
            delete_jobs(kube_plane, ns)
    # exactly the ceiling is admitted, one queue and flavor at a time (the rest idle)
    for queue, (ns, rule) in per_queue.items():
        for flavor, ceiling in rule.ceilings.items():
            kube_plane.apply_manifest(gpu_job(f"fit-{flavor}", ns, queue, ceiling, node_selector=flavors[flavor]))
            wait_for(
                f"{queue} admitted {ceiling} on {flavor}",
                lambda ns=ns, flavor=flavor: admitted(workloads(kube_plane, ns).get(f"fit-{flavor}")),
                30,
            )
            delete_jobs(kube_plane, ns)


# --- a guarantee comes back whatever the borrower's tier; own guarantee first ------------------------------
def lending_tree(org: str, *, departments: bool):
    """org (8 a100 + 8 v100) → owner (4 a100 lendable 4, 4 v100) and borrower (4 a100, burst 4), each in its
    own department when ``departments``. Tiers P0 > P1 > P3."""
    b = TreeBuilder()
    b.flavor("kube/a100", 8)
    b.flavor("kube/v100", 8)
    b.contracts["std"] = Contract("std", 300, 30)
    for name, priority in (("P0", 100000), ("P1", 10000), ("P3", 100)):
        b.tiers[name] = Tier(name, priority, False)
    root = b.unit(org, UnitKind.ORGANISATION, contract="std")
    b.quota(root, "kube/a100", GPU, 8)
    b.quota(root, "kube/v100", GPU, 8)
    parents = {}
    for team in ("owner", "borrower"):
        parent = root
        if departments:
            parent = b.unit(f"d-{team}", UnitKind.DEPARTMENT, root)
            b.quota(parent, "kube/a100", GPU, 4, 4, lendable=4)
            b.quota(parent, "kube/v100", GPU, 4, 4, lendable=4)
        parents[team] = b.unit(team, UnitKind.TEAM, parent)
    b.quota(parents["owner"], "kube/a100", GPU, 4, 0, lendable=4)
    b.quota(parents["owner"], "kube/v100", GPU, 4, 4, lendable=4)
    b.quota(parents["borrower"], "kube/a100", GPU, 4, 4, lendable=4)
    b.quota(parents["borrower"], "kube/v100", GPU, 4, 4, lendable=4)
    snapshot = b.build()
    flavors = (
        KueueFlavor("kube/v100", "v100", {"gpu": "v100"}, billing_weight=0.3),
        KueueFlavor("kube/a100", "a100", {"gpu": "a100"}, billing_weight=1.0),
    )
    namespaces = {parents[t]: (f"{org}-{t}",) for t in parents}
    objects = compile_kueue(snapshot, KueueTarget("kube", flavors, namespaces=namespaces))
    queues = {
        t: next(
            o["metadata"]["name"] for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"].endswith(t)
        )
        for t in parents
    }
    return objects, queues


@pytest.mark.parametrize("departments", [False, True], ids=["same-cohort", "across-departments"])
@pytest.mark.parametrize("tier", ["P1", "P3"])
def test_an_owner_gets_its_lent_guarantee_back_from_borrowers_of_its_own_and_a_higher_tier(
    kube_plane, departments, tier
):
    """Issue #39.3: borrowers at P1 hold the owner's 4 lent a100s; the owner asks at P1 (same tier) and at P3
    (lower than the borrower's) and is admitted, the borrower preempted for it. (With the contracts'
    reclaimWithinCohort LowerPriority, as compiled before, the owner waited at P1 and P3: issue #39, M1.)"""
    org = f"rc{'d' if departments else 's'}{tier.lower()}"
    objects, queues = lending_tree(org, departments=departments)
    for team in ("owner", "borrower"):
        namespace(kube_plane, f"{org}-{team}")
    apply_tree(kube_plane, objects)
    active(kube_plane, queues.values())
    a100 = {"gpu": "a100"}
    try:
        borrower = gpu_job("big", f"{org}-borrower", queues["borrower"], 8, priority="allot-p1", node_selector=a100)
        kube_plane.apply_manifest(borrower)
        wait_for(
            "the borrower holds 8 a100 (4 of them the owner's)",
            lambda: admitted(workloads(kube_plane, f"{org}-borrower").get("big")),
        )
        owner = gpu_job(
            "mine", f"{org}-owner", queues["owner"], 4, priority=f"allot-{tier.lower()}", node_selector=a100
        )
        kube_plane.apply_manifest(owner)
        wait_for(
            "the owner admitted on its guarantee",
            lambda: admitted(workloads(kube_plane, f"{org}-owner").get("mine")),
            60,
        )
        preempted = condition(workloads(kube_plane, f"{org}-borrower")["big"], "Preempted")
        # Kueue names a reclaim InCohortReclamation, or InCohortFairSharing where fair sharing is on (as here)
        assert preempted is not None and preempted["reason"] in ("InCohortReclamation", "InCohortFairSharing")
        assert preempted["status"] == "True" and not admitted(workloads(kube_plane, f"{org}-borrower")["big"])
    finally:
        for team in ("owner", "borrower"):
            delete_jobs(kube_plane, f"{org}-{team}")


def test_unpinned_work_fills_its_own_guarantee_before_borrowing_a_cheaper_flavor(kube_plane):
    """Issue #39.6 (O1): flavors are listed cheapest first (v100, then a100). The borrower has used its own
    4 v100s and may borrow 4 more; an unpinned 4-GPU job goes to its idle a100 guarantee, not borrowed v100s."""
    org = "own-first"
    objects, queues = lending_tree(org, departments=False)
    for team in ("owner", "borrower"):
        namespace(kube_plane, f"{org}-{team}")
    apply_tree(kube_plane, objects)
    active(kube_plane, queues.values())
    ns, queue = f"{org}-borrower", queues["borrower"]
    try:
        kube_plane.apply_manifest(gpu_job("v100s", ns, queue, 4, priority="allot-p1", node_selector={"gpu": "v100"}))
        wait_for("its own v100s used", lambda: admitted(workloads(kube_plane, ns).get("v100s")))
        kube_plane.apply_manifest(gpu_job("unpinned", ns, queue, 4, priority="allot-p1"))
        wl = wait_for(
            "the unpinned job admitted", lambda: (w := workloads(kube_plane, ns).get("unpinned")) and admitted(w) and w
        )
        flavors = wl["status"]["admission"]["podSetAssignments"][0]["flavors"]
        assert flavors == {"nvidia.com/gpu": "a100"}, flavors
    finally:
        delete_jobs(kube_plane, ns)


def test_fair_sharing_rebalances_borrowed_devices_between_borrowers_of_one_tier_by_weight(kube_plane):
    """Issue #39.4 (M2): a lender's 8 idle GPUs; b1 (weight 2) borrowed all of them first, then b2 (weight 1),
    same tier, asks: Kueue's fair sharing preempts b1's borrowed work until b2 holds its share."""
    org = "fairs"
    b = TreeBuilder()
    b.flavor("kube/a100", 12)
    b.contracts["std"] = Contract("std", 300, 30)
    b.tiers["P1"] = Tier("P1", 10000, False)
    root = b.unit(org, UnitKind.ORGANISATION, contract="std")
    b.quota(root, "kube/a100", GPU, 12)
    lender = b.unit("lender", UnitKind.TEAM, root)
    b1 = b.unit("b1", UnitKind.TEAM, root, weight=40)
    b2 = b.unit("b2", UnitKind.TEAM, root, weight=20)
    b.quota(lender, "kube/a100", GPU, 8, 0, lendable=8)
    b.quota(b1, "kube/a100", GPU, 2, 8, lendable=2)
    b.quota(b2, "kube/a100", GPU, 2, 8, lendable=2)
    namespaces = {u: (f"{org}-{n}",) for u, n in ((lender, "lender"), (b1, "b1"), (b2, "b2"))}
    flavor = KueueFlavor("kube/a100", "a100", {"gpu": "a100"})  # as the other tests' a100
    objects = compile_kueue(b.build(), KueueTarget("kube", (flavor,), namespaces=namespaces))
    for n in ("lender", "b1", "b2"):
        namespace(kube_plane, f"{org}-{n}")
    apply_tree(kube_plane, objects)
    active(kube_plane, [f"{org}.{n}" for n in ("lender", "b1", "b2")])
    try:
        for i in range(10):
            kube_plane.apply_manifest(gpu_job(f"j{i}", f"{org}-b1", f"{org}.b1", 1, priority="allot-p1"))
        wait_for("b1 holds 10", lambda: sum(admitted(w) for w in workloads(kube_plane, f"{org}-b1").values()) == 10)
        for i in range(8):
            kube_plane.apply_manifest(gpu_job(f"j{i}", f"{org}-b2", f"{org}.b2", 1, priority="allot-p1"))

        def shares():
            held = {n: sum(admitted(w) for w in workloads(kube_plane, f"{org}-{n}").values()) for n in ("b1", "b2")}
            # converged: b2 borrows some, b1 borrows more (weight 2:1 of 8 borrowable: 16/3 and 8/3)
            return held if held["b1"] + held["b2"] == 12 and held["b2"] >= 4 else None

        held = wait_for("b2 gets its weighted share of the borrowed GPUs", shares, 90)
        assert held["b1"] - 2 >= held["b2"] - 2 >= 2, held
    finally:
        for n in ("b1", "b2"):
            delete_jobs(kube_plane, f"{org}-{n}")


@pytest.mark.django_db
def test_import_from_an_api_server_leaves_out_what_allot_compiled_for_another_cluster(kube_plane, demo):
    """Issue #39.8: k8s-west's objects on a shared API server are never read as a site's setup by another cluster."""
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    demo_on_the_plane(kube_plane, demo)
    assert cluster_sync(actor=None, reason="west", cluster=demo).status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC)
    out = StringIO()
    with pytest.raises(CommandError):  # nothing of a site's is left to import on this API server
        call_command(
            "allot_import_kueue",
            "--from-cluster",
            "--cluster",
            "k8s-east",
            f"--connection-ref=kubeconfig:{kube_plane.admin_kubeconfig}",
            stdout=out,
        )
    text = out.getvalue()
    assert re.search(r"left out \d+ object\(s\) Allot compiled for .*k8s-west.* on the same API server", text), text
    assert "acme.research" not in text and "managed by allot" not in text
