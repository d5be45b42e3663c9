"""Fair sharing as Kueue does it, and the organisation on Kueue's objects (issue #30, parts 1 and 2)."""

from dataclasses import replace

import pytest

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.kueue.target import CompileError, label_value

from .test_translate import by_name, tree

GPU = Resource.GPU


def test_weights_compile_exactly_and_a_positive_one_never_becomes_an_infinite_share():
    b = TreeBuilder()
    b.flavor("west/a100", 16)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    heavy = b.unit("heavy", UnitKind.TEAM, acme, weight=2.5)
    tiny = b.unit("tiny", UnitKind.TEAM, acme, weight=0.0001)
    never = b.unit("never", UnitKind.TEAM, acme, weight=0)
    b.quota(acme, "west/a100", GPU, 16)
    for uid in (heavy, tiny, never):
        b.quota(uid, "west/a100", GPU, 4, 4)
    target = KueueTarget("west", (KueueFlavor("west/a100", "a100"),), namespaces={heavy: ("h",)})
    queues = by_name(compile_kueue(b.build(), target), "ClusterQueue")
    # relative to the largest sibling's (heavy's 2.5), exact to 10⁻⁹
    assert queues["acme.heavy"]["spec"]["fairSharing"] == {"weight": "1"}
    assert queues["acme.tiny"]["spec"]["fairSharing"] == {"weight": "0.00004"}
    assert queues["acme.never"]["spec"]["fairSharing"] == {"weight": "0"}  # Kueue: infinite share, by choice
    snapshot = b.build()
    units = dict(snapshot.units)
    units[tiny] = replace(units[tiny], weight=1e-12)
    with pytest.raises(CompileError, match=r"acme/tiny: fair-share weight 1e-12 is below Kueue's smallest"):
        compile_kueue(replace(snapshot, units=units), target)
    units[tiny] = replace(units[tiny], weight=1e-9)  # Kueue would take it, but not beside 2.5
    with pytest.raises(CompileError, match=r"below 10⁻⁹ of its largest sibling's \(2.5\)"):
        compile_kueue(replace(snapshot, units=units), target)


def test_department_weights_of_20_to_40_keep_kueue_shares_above_zero():
    """Kueue v0.13 computes a share as borrowed‰ × 1000 ÷ weight's milli-value, in integers: with weights 20–40
    a borrower of 3 in 100 lendable reads 30 × 1000 ÷ 40000 = 0, and fair sharing never rebalanced (issue #39.4).
    Relative weights keep every share at least the borrowed per-mille."""
    b = TreeBuilder()
    b.flavor("west/a100", 100)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    depts = {w: b.unit(f"d{w}", UnitKind.DEPARTMENT, acme, weight=w) for w in (20, 30, 40)}
    b.quota(acme, "west/a100", GPU, 100)
    for uid in depts.values():
        b.quota(uid, "west/a100", GPU, 30, 10, lendable=30)
    target = KueueTarget(
        "west", (KueueFlavor("west/a100", "a100"),), namespaces={u: (f"n{w}",) for w, u in depts.items()}
    )
    queues = by_name(compile_kueue(b.build(), target), "ClusterQueue")
    milli = {w: round(float(queues[f"acme.d{w}"]["spec"]["fairSharing"]["weight"]) * 1000) for w in depts}
    assert milli == {20: 500, 30: 750, 40: 1000}
    borrowed_permille = 3 * 1000 // 100
    assert all(borrowed_permille * 1000 // m >= borrowed_permille for m in milli.values())
    assert [borrowed_permille * 1000 // m for m in (20_000, 30_000, 40_000)] == [1, 1, 0]  # what absolute weights gave


def test_classic_and_fair_sharing_compile_the_same_objects_admission_adds_its_scope_and_queue_weights():
    snapshot, target = tree()
    classic = compile_kueue(snapshot, target)
    assert compile_kueue(snapshot, replace(target, sharing="fair")) == classic  # the mode is Kueue's config
    admission = compile_kueue(snapshot, replace(target, sharing="admission"))
    for queue in by_name(admission, "ClusterQueue").values():
        assert queue["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    local = {(o["metadata"]["namespace"]): o for o in admission if o["kind"] == "LocalQueue"}
    assert local["nlp"]["spec"]["fairSharing"] == {"weight": "1.5"}  # nlp's own weight
    assert local["seg"]["spec"]["fairSharing"] == {"weight": "1"}
    assert not any("admissionScope" in q["spec"] for q in by_name(classic, "ClusterQueue").values())


def test_admission_fair_sharing_with_a_zero_half_life_is_refused():
    snapshot, target = tree()
    with pytest.raises(CompileError, match="half-life of 0 s: Kueue would reset usage at once"):
        compile_kueue(snapshot, replace(target, sharing="admission", half_life_s=0))
    with pytest.raises(CompileError, match="'round-robin' is not one of classic, fair, admission"):
        compile_kueue(snapshot, replace(target, sharing="round-robin"))


def test_cohorts_queues_and_local_queues_carry_unit_department_and_cost_centre():
    b = TreeBuilder()
    b.flavor("west/a100", 16)
    acme = b.unit("acme", UnitKind.ORGANISATION, cost_centre="CC-100")
    ml = b.unit("ml", UnitKind.DEPARTMENT, acme, cost_centre="CC-200")
    nlp = b.unit("nlp", UnitKind.TEAM, ml)
    ops = b.unit("ops", UnitKind.DEPARTMENT, acme)
    b.quota(acme, "west/a100", GPU, 16)
    b.quota(ml, "west/a100", GPU, 8)
    b.quota(nlp, "west/a100", GPU, 8)
    b.quota(ops, "west/a100", GPU, 4)
    target = KueueTarget("west", (KueueFlavor("west/a100", "a100"),), namespaces={nlp: ("nlp",)})
    objects = compile_kueue(b.build(), target)

    def org(obj):
        return {
            k: v
            for k, v in obj["metadata"]["labels"].items()
            if k.split("/")[-1] in ("unit", "department", "cost-centre")
        }

    cohorts, queues = by_name(objects, "Cohort"), by_name(objects, "ClusterQueue")
    assert org(cohorts["acme"]) == {"allot.dev/unit": "acme", "allot.dev/cost-centre": "CC-100"}
    assert org(cohorts["acme.ml"]) == {
        "allot.dev/unit": "acme.ml",
        "allot.dev/department": "ml",
        "allot.dev/cost-centre": "CC-200",
    }
    assert org(queues["acme.ml.nlp"]) == {
        "allot.dev/unit": "acme.ml.nlp",
        "allot.dev/department": "ml",
        "allot.dev/cost-centre": "CC-200",  # inherited from its department
    }
    assert org(cohorts["acme.ops"])["allot.dev/cost-centre"] == "CC-100"  # from the organisation
    [local] = [o for o in objects if o["kind"] == "LocalQueue"]
    assert org(local) == org(queues["acme.ml.nlp"])


def test_a_long_unit_name_becomes_a_valid_label_value_that_stays_unique():
    long_a = "acme." + "a" * 40 + "." + "b" * 30
    long_b = "acme." + "a" * 40 + "." + "c" * 30
    assert len(label_value(long_a)) <= 63 and label_value(long_a) != label_value(long_b)
    assert label_value(long_a)[-1].isalnum() and label_value("acme.nlp") == "acme.nlp"


def test_every_mode_compiles_to_objects_the_crds_and_kueues_webhook_accept(crd_schemas):
    from quotas.policy.kueue.validate import validate_objects

    snapshot, target = tree()
    for sharing in ("classic", "fair", "admission"):
        objects = compile_kueue(snapshot, replace(target, sharing=sharing))
        assert [str(p) for p in validate_objects(objects, crd_schemas)] == [], sharing


def test_the_kueue_configuration_each_mode_needs():
    from quotas.policy.kueue.config import KueueConfigError, go_duration, kueue_configuration

    classic = kueue_configuration("classic")
    assert "fairSharing" not in classic and "admissionFairSharing" not in classic
    assert classic["metrics"]["enableClusterQueueResources"] is True
    labels = classic["metrics"]["customLabels"]
    assert {(c["sourceKind"], c["name"]) for c in labels} == {
        (kind, name)
        for kind in ("ClusterQueue", "LocalQueue", "Cohort")
        for name in ("unit", "department", "cost_centre")
    }
    assert all(c["name"][0].isalpha() and c["name"].replace("_", "").isalnum() for c in labels)  # Kueue's rule
    fair = kueue_configuration("fair")
    assert fair["fairSharing"] == {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    assert "admissionFairSharing" not in fair
    admission = kueue_configuration("admission", 3 * 86400 + 90)
    assert admission["admissionFairSharing"] == {"usageHalfLifeTime": "72h1m30s", "usageSamplingInterval": "5m0s"}
    assert go_duration(7 * 86400) == "168h0m0s"
    with pytest.raises(KueueConfigError, match="usageHalfLifeTime of 0 s"):
        kueue_configuration("admission", 0)


def test_the_coverage_report_says_what_kueue_does_with_the_weights_in_each_mode():
    from quotas.policy.coverage import How
    from quotas.policy.kueue.coverage import kueue_coverage

    snapshot, _ = tree()

    def lines(sharing):
        return {(line.term): line for line in kueue_coverage(snapshot, sharing=sharing) if line.subject == "quota"}

    assert lines("classic")["fair-share weight"].how is How.NOT_ENFORCED
    assert "fair-share half-life" not in lines("classic")
    assert lines("fair")["fair-share weight"].how is How.KUEUE
    assert lines("admission")["fair-share half-life"].how is How.KUEUE


def test_a_v0_13_kueue_gets_its_configuration_in_v1beta1():
    """Kueue v0.13/v0.14 read config.kueue.x-k8s.io/v1beta1: fair sharing needs enable: true there, admission fair
    sharing its feature gate, and custom metric labels do not exist (the test control plane runs this fragment)."""
    from quotas.policy.kueue.config import KueueConfigError, kueue_configuration

    fair = kueue_configuration("fair", version="v1beta1")
    assert fair["apiVersion"] == "config.kueue.x-k8s.io/v1beta1"
    assert fair["fairSharing"] == {
        "enable": True,
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
    }
    assert fair["metrics"] == {"enableClusterQueueResources": True} and "featureGates" not in fair
    admission = kueue_configuration("admission", version="v1beta1")
    assert admission["featureGates"] == {"AdmissionFairSharing": True}
    assert "enable" not in kueue_configuration("fair")["fairSharing"]  # v1beta2 dropped it
    with pytest.raises(KueueConfigError, match="use v1beta2"):
        kueue_configuration("fair", version="v1")
