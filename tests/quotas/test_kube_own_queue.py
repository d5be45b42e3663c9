"""A unit's own work inside its guarantee is protected as Kueue enforces it (on the real Kueue of
tests/kube_cluster.py): a unit with children runs its own jobs in a ClusterQueue of its own, which holds the
part of its guarantee its children do not (its residual) as nominal quota — so when a child asks for the
guarantee it lent, Kueue takes it back from the true borrower, never from the parent's own work inside its
residual. This tree does not tell the two compilations apart (run with the own queue at nominal 0, as compiled
before, Kueue also took the true borrower here, under classic and fair sharing alike); the queue's nominal quota is
asserted, and the test keeps what Kueue must do with it. The failure the change answers was seen on the demo's
tree, where the parent's own work was preempted first."""

from __future__ import annotations

import pytest

from quotas.policy import Resource
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.snapshot import Contract, Tier, UnitKind
from tests.kube_work import admitted, condition, delete_jobs, gpu_job, namespace, wait_for, workloads
from tests.quotas.test_kube_real import active, apply_tree

pytestmark = pytest.mark.kube
GPU = Resource.GPU
ORG = "ownq"
A100 = {"gpu": f"{ORG}-a100"}


def tree():
    """ownq (12 a100) → research (8: vis 6 with det 2 inside it, speech 2) and production (4: rank 4, burst 4);
    every guarantee lendable. vis runs its own jobs in a queue of its own."""
    b = TreeBuilder()
    key = f"kube/{ORG}-a100"
    b.flavor(key, 12)
    b.contracts["std"] = Contract("std", 300, 30)
    b.tiers["P1"] = Tier("P1", 10000, False)
    root = b.unit(ORG, UnitKind.ORGANISATION, contract="std")
    research = b.unit("research", UnitKind.DEPARTMENT, root)
    production = b.unit("production", UnitKind.DEPARTMENT, root)
    vis = b.unit("vis", UnitKind.TEAM, research)
    det = b.unit("det", UnitKind.PROJECT, vis)
    speech = b.unit("speech", UnitKind.TEAM, research)
    rank = b.unit("rank", UnitKind.TEAM, production)
    b.quota(root, key, GPU, 12)
    for unit, g, burst in (
        (research, 8, 4),
        (production, 4, 4),
        (vis, 6, 0),
        (det, 2, 0),
        (speech, 2, 0),
        (rank, 4, 4),
    ):
        b.quota(unit, key, GPU, g, burst, lendable=g)
    namespaces = {u: (f"{ORG}-{n}",) for u, n in ((vis, "vis"), (det, "det"), (speech, "speech"), (rank, "rank"))}
    target = KueueTarget("kube", (KueueFlavor(key, f"{ORG}-a100", A100),), namespaces=namespaces)
    return compile_kueue(b.build(), target)


def queue_of(objects, ns):
    return next(
        o["spec"]["clusterQueue"] for o in objects if o["kind"] == "LocalQueue" and o["metadata"]["namespace"] == ns
    )


def test_a_reclaim_takes_the_true_borrower_not_the_parents_own_work_inside_its_guarantee(kube_plane):
    """vis runs 6 in its own queue (its residual 4 and det's idle 2: its whole guarantee); rank runs 6 (its 4 and
    speech's idle 2, across departments). speech asks for its 2: Kueue takes them from rank, the true borrower."""
    objects = tree()
    own = next(o for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == f"{ORG}.research.vis")
    [entry] = own["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert (entry["nominalQuota"], entry["borrowingLimit"]) == ("4", "2")  # 6 − det's 2; up to vis's ceiling
    teams = ("vis", "det", "speech", "rank")
    for team in teams:
        namespace(kube_plane, f"{ORG}-{team}")
    apply_tree(kube_plane, objects)
    ns = {team: f"{ORG}-{team}" for team in teams}
    active(kube_plane, [queue_of(objects, ns[t]) for t in teams])

    def run(team, name):
        job = gpu_job(name, ns[team], queue_of(objects, ns[team]), 1, priority="allot-p1", node_selector=A100)
        kube_plane.apply_manifest(job)

    def held(team):
        return sorted(n for n, w in workloads(kube_plane, ns[team]).items() if admitted(w))

    try:
        for i in range(6):
            run("vis", f"own-{i}")
        wait_for("vis runs 6 in its own queue", lambda: len(held("vis")) == 6)
        for i in range(6):
            run("rank", f"r-{i}")
        wait_for("rank holds 6 (2 of them speech's)", lambda: len(held("rank")) == 6)
        for i in range(2):
            run("speech", f"s-{i}")
        wait_for("speech gets its 2 back", lambda: len(held("speech")) == 2, 90)
        assert held("vis") == [f"own-{i}" for i in range(6)]  # the parent's own work inside its guarantee stays
        assert len(held("rank")) == 4
        assert not any(condition(w, "Preempted") for w in workloads(kube_plane, ns["vis"]).values())
    finally:
        for team in teams:
            delete_jobs(kube_plane, ns[team])
