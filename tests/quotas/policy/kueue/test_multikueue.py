"""One tree over a MultiKueue fleet (issue #30, part 5: the compiler): golden files for a manager and two
workers, every object valid against the bundled CRDs and their CEL rules. Pure."""

import os
from pathlib import Path

import pytest

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, render_yaml
from quotas.policy.kueue.multikueue import Fleet, Worker, compile_fleet
from quotas.policy.kueue.target import CompileError
from quotas.policy.kueue.validate import validate_objects

GPU = Resource.GPU
GOLDEN = Path(__file__).resolve().parents[3] / "golden"


def fleet_tree():
    """acme → ml (weight 2) → nlp (ns nlp), vision (ns vision); a100 on both workers, h100 on west-2 only."""
    b = TreeBuilder()
    for key, devices in (("west-1/a100", 64), ("west-2/a100", 32), ("west-2/h100", 16)):
        b.flavor(key, devices)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    ml = b.unit("ml", UnitKind.DEPARTMENT, acme, weight=2)
    nlp = b.unit("nlp", UnitKind.TEAM, ml)
    vision = b.unit("vision", UnitKind.TEAM, ml)
    quotas = {acme: (64, 32, 16), ml: (48, 24, 16), nlp: (32, 16, 8), vision: (16, 8, 8)}
    for uid, (a1, a2, h2) in quotas.items():
        b.quota(uid, "west-1/a100", GPU, a1, 0 if uid == acme else 8)
        b.quota(uid, "west-2/a100", GPU, a2, 0 if uid == acme else 4)
        b.quota(uid, "west-2/h100", GPU, h2)
    fleet = Fleet("west", "hub", (Worker("west-1", "west-1-kubeconfig"), Worker("west-2", "west-2-kubeconfig")))
    manager = KueueTarget("hub", (), namespaces={nlp: ("nlp",), vision: ("vision",)})
    workers = {
        "west-1": KueueTarget("west-1", (KueueFlavor("west-1/a100", "a100", {"gpu": "a100"}),)),
        "west-2": KueueTarget(
            "west-2",
            (
                KueueFlavor("west-2/a100", "a100", {"gpu": "a100"}),
                KueueFlavor("west-2/h100", "h100", {"gpu": "h100"}, order=1),
            ),
        ),
    }
    return b.build(), fleet, manager, workers


@pytest.mark.parametrize("cluster", ["hub", "west-1", "west-2"])
def test_the_fleet_compiles_to_the_golden_objects(cluster):
    objects = compile_fleet(*fleet_tree())[cluster]
    text = render_yaml(objects)
    golden = GOLDEN / f"fleet-{cluster}.yaml"
    if os.environ.get("ALLOT_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()


def test_every_object_of_the_fleet_passes_the_crds_and_their_cel_rules(crd_schemas):
    for cluster, objects in compile_fleet(*fleet_tree()).items():
        assert [str(p) for p in validate_objects(objects, crd_schemas)] == [], cluster


def test_the_manager_sums_each_flavor_over_the_workers_and_every_queue_waits_for_multikueue():
    hub = compile_fleet(*fleet_tree())["hub"]
    kinds = [o["kind"] for o in hub]
    assert kinds.index("AdmissionCheck") < kinds.index("ClusterQueue")  # applied before the queues naming it
    nlp = next(o for o in hub if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "acme.ml.nlp")
    a100 = next(f for f in nlp["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "a100")
    assert a100["resources"][0] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "48",
        "borrowingLimit": "12",
        "lendingLimit": "0",
    }
    assert nlp["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "allot-multikueue-west"}]}
    [config] = [o for o in hub if o["kind"] == "MultiKueueConfig"]
    assert config["spec"] == {"clusters": ["west-1", "west-2"], "quotaManagement": "Manual"}  # the operator's order
    secrets = {
        o["metadata"]["name"]: o["spec"]["clusterSource"]["kubeConfig"] for o in hub if o["kind"] == "MultiKueueCluster"
    }
    assert secrets["west-2"] == {
        "locationType": "Secret",
        "location": "west-2-kubeconfig",
    }  # a reference, never a credential
    [check] = [o for o in hub if o["kind"] == "AdmissionCheck"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"


def queues(objects):
    return {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "LocalQueue"}


def test_each_worker_has_the_managers_namespaces_and_queues_with_its_own_quota():
    compiled = compile_fleet(*fleet_tree())
    for worker in ("west-1", "west-2"):
        local = {
            (o["metadata"]["namespace"], o["metadata"]["name"]) for o in compiled[worker] if o["kind"] == "LocalQueue"
        }
        hub = {
            (o["metadata"]["namespace"], o["metadata"]["name"]) for o in compiled["hub"] if o["kind"] == "LocalQueue"
        }
        assert local == hub == {("nlp", "acme.ml.nlp"), ("vision", "acme.ml.vision")}
    assert not any(o["kind"] in ("AdmissionCheck", "MultiKueueConfig") for o in compiled["west-1"])
    west2 = next(
        o for o in compiled["west-2"] if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "acme.ml.nlp"
    )
    assert [f["name"] for f in west2["spec"]["resourceGroups"][0]["flavors"]] == ["a100", "h100"]


def test_under_quota_automation_the_managers_queues_carry_no_quota(crd_schemas):
    snapshot, fleet, manager, workers = fleet_tree()
    from dataclasses import replace

    hub = compile_fleet(snapshot, replace(fleet, quota_automation=True), manager, workers)["hub"]
    assert [str(p) for p in validate_objects(hub, crd_schemas)] == []
    assert not any("resourceGroups" in o["spec"] for o in hub if o["kind"] in ("ClusterQueue", "Cohort"))
    assert next(o for o in hub if o["kind"] == "MultiKueueConfig")["spec"]["quotaManagement"] == "Automated"


@pytest.mark.parametrize(
    "workers, message",
    [
        ((), "give it at least one worker cluster"),
        ((Worker("hub", "s"),), "hub cannot be a worker of itself"),
        ((Worker("west-1", "a"), Worker("west-1", "b")), "west-1 listed more than once"),
        (tuple(Worker(f"w{i}", "s") for i in range(21)), "21 workers, but a MultiKueueConfig lists at most 20"),
        ((Worker("west-1", ""),), "needs the name of its kubeconfig Secret"),
    ],
)
def test_a_fleet_kueue_would_refuse_is_refused_before_compiling(workers, message):
    snapshot, fleet, manager, targets = fleet_tree()
    from dataclasses import replace

    with pytest.raises(CompileError, match=message):
        compile_fleet(snapshot, replace(fleet, workers=workers), manager, targets)


def test_a_workers_budget_governs_the_managers_flavor_of_its_name_the_more_spent_one_holding():
    """Issue #40.4: budgets never refused or warned on a MultiKueue manager (they sat on the workers' flavor keys)."""
    from dataclasses import replace
    from datetime import UTC, datetime
    from types import MappingProxyType

    from quotas.policy.budgets import Budget, BudgetAction, BudgetSpend
    from quotas.policy.kueue.multikueue import manager_snapshot

    b = TreeBuilder()
    b.flavor("west-1/a100", 64)
    b.flavor("west-2/a100", 32)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    b.quota(acme, "west-1/a100", Resource.GPU, 64)
    b.quota(acme, "west-2/a100", Resource.GPU, 32)
    start = datetime(2026, 12, 1, tzinfo=UTC)
    snapshot = replace(
        b.build(),
        budgets=MappingProxyType(
            {
                (acme, "west-1/a100"): Budget(acme, "west-1/a100", 100, action=BudgetAction.DENY, tiers=("P1",)),
                (acme, "west-2/a100"): Budget(acme, "west-2/a100", 50, action=BudgetAction.DENY, tiers=("P1",)),
            }
        ),
        budget_spend=MappingProxyType(
            {
                (acme, "west-1/a100"): BudgetSpend(start, 100.0, 40.0),
                (acme, "west-2/a100"): BudgetSpend(start, 50.0, 50.0),  # spent: this one holds
            }
        ),
    )
    fleet = Fleet("west", "hub", (Worker("west-1", "s1"), Worker("west-2", "s2")))
    moved = manager_snapshot(snapshot, fleet, {"west-1/a100": "a100", "west-2/a100": "a100"})
    assert set(moved.budgets) == {(acme, "hub/a100")} and moved.budgets[(acme, "hub/a100")].device_hours == 50
    assert moved.budget_spend[(acme, "hub/a100")].spent == 50.0
    assert moved.quotas[(acme, "hub/a100", Resource.GPU)].guarantee == 96
