"""The Kueue translator on a hand-checked tree."""

from dataclasses import replace

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue, render_yaml
from quotas.policy.snapshot import Contract, Tier

GPU, CPU = Resource.GPU, Resource.CPU
A100, V100 = "west/a100", "west/v100"


def tree():
    """acme (GPU 100) → ml (60, b20, lend 60) → nlp (30, b10, lend 15, namespaces nlp, nlp-dev)
                              → vision (20, b10) → det (12, b4, own cap) ; seg (no cap, ns seg)
    → ops (0 quota, ns ops-tools)"""
    b = TreeBuilder()
    b.flavor(A100, 120)
    b.flavor(V100, 40)
    b.contracts["std"] = Contract("std", 900, 60, reclaim_within_cohort="Any", within_cluster_queue="Never")
    acme = b.unit("acme", UnitKind.ORGANISATION, contract="std")
    ml = b.unit("ml", UnitKind.DEPARTMENT, acme, weight=2)
    nlp = b.unit("nlp", UnitKind.TEAM, ml, weight=1.5)
    vision = b.unit("vision", UnitKind.TEAM, ml)
    det = b.unit("det", UnitKind.PROJECT, vision)
    seg = b.unit("seg", UnitKind.PROJECT, vision)
    ops = b.unit("ops", UnitKind.DEPARTMENT, acme)
    b.unit("idle", UnitKind.DEPARTMENT, acme)  # no quota, no namespace: not on this cluster
    for flavor, scale in ((A100, 1), (V100, 0)):
        b.quota(acme, flavor, GPU, 100 * scale)
        b.quota(ml, flavor, GPU, 60 * scale, 20 * scale, 60 * scale)
        b.quota(nlp, flavor, GPU, 30 * scale, 10 * scale, 15 * scale)
        b.quota(vision, flavor, GPU, 20 * scale, 10 * scale, 10 * scale)
        b.quota(det, flavor, GPU, 12 * scale, 4 * scale, 0)
    b.quota(acme, A100, CPU, 1_000_000)
    b.quota(nlp, A100, CPU, 64_000, 500, 0)
    b.tiers["P0"] = Tier("P0", 100000, False, display_name="Production serving")
    b.tiers["P3"] = Tier("P3", 100, True, opportunistic=True, display_name="Batch")
    target = KueueTarget(
        cluster="west",
        flavors=(
            KueueFlavor(A100, "a100", {"gpu": "a100"}, billing_weight=1.0),
            KueueFlavor(
                V100,
                "v100",
                {"gpu": "v100"},
                billing_weight=0.3,
                tolerations=({"key": "old", "operator": "Exists", "effect": "NoSchedule"},),
            ),
        ),
        namespaces={nlp: ("nlp-dev", "nlp"), seg: ("seg",), ops: ("ops-tools",)},
        revision=42,
    )
    return b.build(), target


def by_name(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def resources(obj, flavor):
    group = obj["spec"]["resourceGroups"][0]
    entry = next(f for f in group["flavors"] if f["name"] == flavor)
    return {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in entry["resources"]}


def test_objects_come_in_apply_order_with_ownership_metadata():
    objects = compile_kueue(*tree())
    kinds = [o["kind"] for o in objects]
    order = ["ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"]
    assert kinds == sorted(kinds, key=order.index)
    for obj in objects:
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        labels = obj["metadata"]["labels"]
        assert {k: labels[k] for k in ("app.kubernetes.io/managed-by", "allot.dev/cluster")} == {
            "app.kubernetes.io/managed-by": "allot",
            "allot.dev/cluster": "west",
        }
        org = {"allot.dev/unit", "allot.dev/department", "allot.dev/cost-centre"}
        if obj["kind"] in ("Cohort", "ClusterQueue", "LocalQueue"):  # the organisation, for Kueue's metrics
            assert labels["allot.dev/unit"] == obj["metadata"]["annotations"]["allot.dev/unit-path"].replace("/", ".")
        else:
            assert not org & set(labels)
        assert obj["metadata"]["annotations"]["allot.dev/policy-revision"] == "42"


def test_cohorts_parent_first_carry_only_the_residual_guarantee():
    objects = compile_kueue(*tree())
    cohorts = [o for o in objects if o["kind"] == "Cohort"]
    assert [c["metadata"]["name"] for c in cohorts] == ["acme", "acme.ml", "acme.ops", "acme.ml.vision"]
    root, ml = cohorts[0], cohorts[1]
    assert "parentName" not in root["spec"]
    # acme 100 − ml 60 − ops 0 = 40; no limits on a root (no parent)
    assert resources(root, "a100")["nvidia.com/gpu"] == {"nominalQuota": "40"}
    # ml 60 − nlp 30 − vision 20 = 10; limits cap the subtree
    assert ml["spec"]["parentName"] == "acme"
    assert resources(ml, "a100")["nvidia.com/gpu"] == {
        "nominalQuota": "10",
        "borrowingLimit": "20",
        "lendingLimit": "60",
    }
    # weights relative to the largest sibling's (ml 2, ops 1): Kueue divides integer shares by the weight
    assert ml["spec"]["fairSharing"] == {"weight": "1"}
    assert by_name(objects, "Cohort")["acme.ops"]["spec"]["fairSharing"] == {"weight": "0.5"}
    assert "acme.idle" not in by_name(objects, "Cohort")


def test_total_nominal_capacity_equals_the_organisation_guarantee():
    objects = compile_kueue(*tree())
    total = sum(
        int(resources(o, "a100")["nvidia.com/gpu"]["nominalQuota"])
        for o in objects
        if o["kind"] in ("Cohort", "ClusterQueue")
    )
    assert total == 100


def test_team_cluster_queue_and_folded_namespaces():
    objects = compile_kueue(*tree())
    nlp = by_name(objects, "ClusterQueue")["acme.ml.nlp"]["spec"]
    assert nlp["cohortName"] == "acme.ml"
    assert nlp["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["nlp", "nlp-dev"]}
    ]
    assert nlp["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    assert nlp["fairSharing"] == {"weight": "1"}  # nlp 1.5 beside vision 1
    assert nlp["flavorFungibility"] == {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}
    vision = by_name(objects, "Cohort")["acme.ml.vision"]["spec"]
    assert vision["fairSharing"] == {"weight": "0.666666667"}
    group = nlp["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "nvidia.com/gpu"]  # no memory quota anywhere: not covered
    assert [f["name"] for f in group["flavors"]] == ["v100", "a100"]  # cheapest billing weight first
    assert resources(by_name(objects, "ClusterQueue")["acme.ml.nlp"], "a100") == {
        "cpu": {"nominalQuota": "64", "borrowingLimit": "500m", "lendingLimit": "0"},
        "nvidia.com/gpu": {"nominalQuota": "30", "borrowingLimit": "10", "lendingLimit": "15"},
    }
    assert all(len(f["resources"]) == len(group["coveredResources"]) for f in group["flavors"])


def test_team_with_capped_projects_is_a_cohort_with_a_queue_for_the_rest():
    objects = compile_kueue(*tree())
    queues = by_name(objects, "ClusterQueue")
    assert queues["acme.ml.vision.det"]["spec"]["cohortName"] == "acme.ml.vision"
    assert "namespaceSelector" not in queues["acme.ml.vision.det"]["spec"]  # null selector: no namespace
    # seg has no cap: its namespace goes to vision's own queue, which holds vision's residual guarantee
    # (20 − det's 12 = 8) as its own — work inside it is not borrowing, so no reclaim takes it — and borrows
    # beyond it up to vision's ceiling of 30
    rest = queues["acme.ml.vision"]["spec"]
    assert rest["cohortName"] == "acme.ml.vision"
    assert rest["namespaceSelector"]["matchExpressions"][0]["values"] == ["seg"]
    assert resources(queues["acme.ml.vision"], "a100")["nvidia.com/gpu"] == {
        "nominalQuota": "8",
        "borrowingLimit": "22",
    }
    # vision's cohort adds nothing of its own: the residual is its own queue's
    assert resources(by_name(objects, "Cohort")["acme.ml.vision"], "a100")["nvidia.com/gpu"]["nominalQuota"] == "0"


def test_local_queues_and_priority_classes():
    objects = compile_kueue(*tree())
    local = [
        (o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["clusterQueue"])
        for o in objects
        if o["kind"] == "LocalQueue"
    ]
    assert local == [
        ("nlp", "acme.ml.nlp", "acme.ml.nlp"),
        ("nlp-dev", "acme.ml.nlp", "acme.ml.nlp"),
        ("ops-tools", "acme.ops", "acme.ops"),
        ("seg", "acme.ml.vision", "acme.ml.vision"),
    ]
    wpc = by_name(objects, "WorkloadPriorityClass")
    assert wpc["allot-p0"]["value"] == 100000 and wpc["allot-p0"]["description"] == "Production serving"
    assert "spec" not in wpc["allot-p3"]


def test_flavors_carry_labels_and_tolerations():
    flavors = by_name(compile_kueue(*tree()), "ResourceFlavor")
    assert flavors["a100"]["spec"] == {"nodeLabels": {"gpu": "a100"}}
    assert flavors["v100"]["spec"]["tolerations"] == [{"effect": "NoSchedule", "key": "old", "operator": "Exists"}]


def test_output_is_byte_identical_for_the_same_snapshot():
    snapshot, target = tree()
    first = render_yaml(compile_kueue(snapshot, target))
    # the same content built in another order: dict insertion order must not leak into the output
    shuffled = replace(
        snapshot,
        units=dict(reversed(list(snapshot.units.items()))),
        quotas=dict(reversed(list(snapshot.quotas.items()))),
    )
    target2 = replace(
        target,
        flavors=tuple(reversed(target.flavors)),
        namespaces={k: tuple(reversed(v)) for k, v in reversed(list(target.namespaces.items()))},
    )
    assert render_yaml(compile_kueue(shuffled, target2)) == first
    assert render_yaml(compile_kueue(snapshot, target)) == first


def test_the_coverage_report_says_which_part_of_a_parents_guarantee_kueue_protects():
    from quotas.policy.kueue.coverage import kueue_coverage

    snapshot, target = tree()
    lines = {
        (line.subject, line.term): line
        for line in kueue_coverage(snapshot, objects=compile_kueue(snapshot, target))
        if line.subject.startswith("unit ")
    }
    vision = lines[("unit acme/ml/vision", "own work on a100")]
    assert vision.value == "8 GPUs protected, up to 30 with borrowing"  # 20 − det's 12; vision's ceiling 30
    assert "never a reclaim's victim" in vision.mechanism and "a reclaim may take back" in vision.mechanism
