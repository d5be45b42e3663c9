"""Issue #25, admission: objects as the API server really sends them (its defaults applied before
admission), pins read as Kubernetes combines them, and the false allows and denies an independent
oracle found — each case fails on the earlier rules."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from admission.policy.decide import Reason, decide
from tests.admission.policy.test_decide import LABELS, job, policy, request
from tests.admission.policy.test_kueue_machinery import (
    JOB_CONTROLLER,
    KUEUE,
    as_user,
    kueue_workload,
    owner_ref,
    pod_from,
    update,
)

P3 = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
CHECKPOINT = {"allot.dev/checkpoint-every": "15m"}


def defaulted(obj):
    """What the API server does before admission: every pod spec gets terminationGracePeriodSeconds 30
    (and more fields Allot does not read), as in tests/fixtures/admission-samples."""
    obj = copy.deepcopy(obj)
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("restartPolicy", "Never")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    return obj


def test_the_sample_the_api_server_sent_carries_the_default_grace(fixtures):
    import json

    sample = json.loads((fixtures / "admission-samples" / "admissionreview-request-pod-create.json").read_text())
    assert sample["request"]["object"]["spec"]["terminationGracePeriodSeconds"] == 30


# --- 1. the contract's grace reaches the pods ------------------------------------------------------


def test_the_api_servers_default_grace_is_replaced_by_the_contracts():
    obj = defaulted(job(labels=P3, annotations=CHECKPOINT))
    decision = decide(policy(), request(copy.deepcopy(obj)), mutate=True)
    assert decision.allowed, decision.message
    grace = {"op": "replace", "path": "/spec/template/spec/terminationGracePeriodSeconds", "value": 60}
    assert grace in decision.patch  # the contract's 60 s, not Kubernetes' 30
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    assert decide(policy(), request(patched)).allowed
    again = decide(policy(), request(copy.deepcopy(patched)), mutate=True)
    assert not [p for p in again.patch if "terminationGracePeriodSeconds" in p["path"]]  # idempotent


def test_a_grace_chosen_above_the_contract_is_refused_and_below_it_kept():
    above = defaulted(job(labels=P3, annotations=CHECKPOINT, pod={"terminationGracePeriodSeconds": 900}))
    refused = decide(policy(), request(above), mutate=True)
    assert refused.reason is Reason.GRACE_TOO_LONG and "leave it out" in refused.message
    below = defaulted(job(labels=P3, annotations=CHECKPOINT, pod={"terminationGracePeriodSeconds": 10}))
    kept = decide(policy(), request(below), mutate=True)
    assert kept.allowed and not [p for p in kept.patch if "terminationGracePeriodSeconds" in p["path"]]


def test_the_default_grace_is_never_refused_as_above_a_shorter_contract():
    """Validation of an object the mutating webhook did not see (e.g. an owned pod): 30 is not chosen."""
    strict = policy()
    obj = defaulted(job(labels=P3, annotations=CHECKPOINT, pod={"terminationGracePeriodSeconds": 30}))
    assert decide(strict, request(obj)).reason is not Reason.GRACE_TOO_LONG


# --- 6. false allows ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "api"),
    [("ReplicaSet", "apps/v1"), ("StatefulSet", "apps/v1"), ("CronJob", "batch/v1"), ("Notebook", "kubeflow.org/v1")],
)
def test_a_controllers_pod_owned_by_a_kind_allot_never_judged_is_judged_in_full(kind, api):
    pod = pod_from(job())
    pod["metadata"]["labels"] = {}
    pod["metadata"]["ownerReferences"] = [owner_ref(kind=kind, api=api)]
    decision = decide(policy(), as_user(request(pod, kind=("", "Pod")), "system:kube-controller-manager"))
    assert decision.reason is Reason.MISSING_LABEL, decision
    jobs_pod = decide(policy(), as_user(request(pod_from(job()), kind=("", "Pod")), JOB_CONTROLLER))
    assert jobs_pod.reason is Reason.OWNED  # a Job's pod is still its Job's


def test_node_selector_and_required_affinity_are_anded():
    def pinned(selector, *terms, gpus=2, parallelism=1):
        pod = {"nodeSelector": selector}
        if terms:
            pod["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": list(t)}]} for t in terms
                        ]
                    }
                }
            }
        return decide(policy(), request(job(gpus=gpus, parallelism=parallelism, pod=pod)))

    # an unknown pin in the affinity is not hidden by a known one in the selector
    assert pinned({"gpu": "a100-40gb"}, ["h100"]).reason is Reason.UNKNOWN_FLAVOR
    # 40 GPUs on the 40-GB flavor (nlp's ceiling there is 12), "also allowed" on 80 GB by the affinity: refused
    decision = pinned({"gpu": "a100-40gb"}, ["a100-80gb", "a100-40gb"], gpus=4, parallelism=10)
    assert decision.reason is Reason.EXCEEDS_CEILING and "on a100-40gb" in decision.message
    # ORed terms: either flavor, so the larger ceiling (24 on 80 GB) holds 20
    assert pinned({}, ["a100-80gb"], ["a100-40gb"], gpus=4, parallelism=5).allowed


def test_gt_and_lt_on_a_flavor_label_compare_integers_as_kubernetes_does():
    """Issue #40.4: "gpu Gt 3" matches no node labelled gpu=a100-80gb (Kubernetes parses both as integers): the
    pod would wait forever, so it is a pin to no flavor, not "any flavor"."""

    def affinity(op, value):
        term = {"matchExpressions": [{"key": "gpu", "operator": op, "values": [value]}]}
        pod = {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
            }
        }
        return decide(policy(), request(job(pod=pod)))

    for op in ("Gt", "Lt"):
        decision = affinity(op, "3")
        assert decision.reason is Reason.UNKNOWN_FLAVOR and "wait forever" in decision.message


def test_a_pin_to_no_flavor_is_refused_for_cpu_pods_and_mapped_accelerators_too():
    from dataclasses import replace

    cpu = decide(policy(), request(job(gpus=0, pod={"nodeSelector": {"gpu": "h100"}})))
    assert cpu.reason is Reason.UNKNOWN_FLAVOR
    amd = replace(policy(), accelerators={"nvidia.com/gpu": None, "amd.com/gpu": "a100-40gb"})
    obj = job(pod={"nodeSelector": {"gpu": "a100-80gb"}})
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"amd.com/gpu": "1"}}
    elsewhere = decide(amd, request(obj))  # its devices are a100-40gb's, its pin says 80 GB
    assert elsewhere.reason is Reason.PIN_MISMATCH  # its pin matches a flavor, not the one that offers it
    assert "pin a flavor that offers it instead: a100-40gb (gpu=a100-40gb)" in elsewhere.message


def test_an_update_is_judged_violation_by_violation():
    old = job(labels={k: v for k, v in LABELS.items() if k != "allot.dev/project"})  # lacked one label
    for change, reason in (
        ({"allot.dev/owner": "mallory"}, Reason.UNKNOWN_OWNER),
        ({"allot.dev/contract": "gold"}, Reason.WRONG_CONTRACT),
        ({"allot.dev/tier": "P0"}, Reason.TIER_NOT_ALLOWED),
    ):
        new = copy.deepcopy(old)
        new["metadata"]["labels"].update(change)
        decision = decide(policy(), update(old, new))
        assert decision.reason is reason, (change, decision)
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"]["team-note"] = "x"
    assert decide(policy(), update(old, relabelled)).allowed  # the old gap alone blocks nothing


# --- 7. false denies ----------------------------------------------------------------------------------


def test_a_workload_keeps_quantities_as_written_and_4000m_is_4():
    workload = kueue_workload(job(gpus=1))
    workload["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "4000m"}
    }
    decision = decide(policy(), as_user(request(workload, kind=("kueue.x-k8s.io", "Workload")), KUEUE))
    assert decision.allowed, decision.message
    workload["spec"]["podSets"][0]["count"] = 7  # 28 > 24: counted as 4 each
    assert decide(policy(), as_user(request(workload, kind=("kueue.x-k8s.io", "Workload")), KUEUE)).reason is (
        Reason.EXCEEDS_CEILING
    )
    half = job()
    half["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1500m"}}
    assert decide(policy(), request(half)).reason is Reason.FRACTIONAL_DEVICE  # a fraction of a device


def test_updates_in_an_unbound_namespace_are_not_blocked():
    old = job()
    old["metadata"]["namespace"] = "elsewhere"
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    decision = decide(policy(), {**update(old, new), "namespace": "elsewhere"})
    assert decision.allowed and decision.reason is Reason.NOT_CHECKED
    assert decide(policy(), request(old, namespace="elsewhere")).reason is Reason.NAMESPACE_UNBOUND  # CREATE is


def test_an_unmapped_accelerator_asked_for_zero_is_not_refused():
    obj = job()
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["amd.com/gpu"] = "0"
    assert decide(policy(), request(obj)).allowed
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["amd.com/gpu"] = "1"
    assert decide(policy(), request(obj)).reason is Reason.UNGOVERNED_ACCELERATOR


def test_kueues_workload_for_a_job_stays_owned_and_its_pods_are_the_jobs():
    """The owned path still covers the chain Kueue really runs (Workload → Job; pods → Job)."""
    workload = kueue_workload(job())
    assert decide(policy(), as_user(request(workload, kind=("kueue.x-k8s.io", "Workload")), KUEUE)).reason is (
        Reason.OWNED
    )


def test_a_fractional_gpu_is_refused_by_its_own_rule_not_as_malformed():
    """Issue #40.4: ``500m`` is a valid quantity, not a malformed object: the denial names the rule and the fix."""
    pod = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}]}
    decision = decide(policy(), request(job(pod=pod)))
    assert decision.reason is Reason.FRACTIONAL_DEVICE and "whole devices" in decision.message
    assert "ask for 1" in decision.message and "schema" not in decision.message


def test_an_update_adding_an_ored_term_that_allows_every_flavor_is_no_new_violation():
    """Issue #40.4: an old job above the ceiling on any flavor gets an affinity whose ORed terms allow both
    flavors: the same violation it had (UNCHANGED), not a new one that blocks the UPDATE."""
    import copy

    old = job(gpus=4, parallelism=10)  # 40 GPUs on any flavor: above nlp's 24
    new = copy.deepcopy(old)
    terms = [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": [f]}]} for f in ("a100-80gb", "a100-40gb")
    ]
    new["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    update = request(new, operation="UPDATE")
    update["oldObject"] = old
    decision = decide(policy(), update)
    assert decision.allowed and decision.reason is Reason.UNCHANGED, decision
