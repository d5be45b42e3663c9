"""Issue #40: Workloads of an older Kueue (≤ v0.14, ``kueue.x-k8s.io/v1beta1``) are judged as v1beta2's are:
there the priority class is ``spec.priorityClassName`` with ``spec.priorityClassSource``, not
``spec.priorityClassRef``, so a hand-made Workload on such a cluster used to be refused or mutated wrongly."""

from __future__ import annotations

import copy

import jsonpatch

from admission.policy.decide import Reason, decide
from tests.admission.policy.test_decide import LABELS, job, policy, request

WORKLOAD = ("kueue.x-k8s.io", "Workload")
OWNERSHIP = {k: v for k, v in LABELS.items() if k.startswith("allot.dev/")}


def v1beta1(gpus=2, count=4, **spec):
    """A Workload written by a person (no owner reference) in v1beta1's spelling."""
    template = copy.deepcopy(job(gpus=gpus)["spec"]["template"])
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "by-hand", "namespace": "nlp", "labels": dict(OWNERSHIP)},
        "spec": {"podSets": [{"name": "main", "count": count, "template": template}], **spec},
    }


def judged(obj, *, mutate=False):
    return decide(policy(), request(obj, kind=WORKLOAD), mutate=mutate)


def test_a_v1beta1_workload_naming_the_tiers_class_is_allowed_and_too_large_is_refused():
    ok = v1beta1(
        queueName="acme.ml.nlp",
        priorityClassName="allot-p1",
        priorityClassSource="kueue.x-k8s.io/workloadpriorityclass",
    )
    decision = judged(ok)
    assert decision.allowed, decision.message
    too_large = copy.deepcopy(ok)
    too_large["spec"]["podSets"][0]["count"] = 200
    assert judged(too_large).reason is Reason.EXCEEDS_CEILING


def test_a_pod_priority_class_of_the_same_name_is_not_the_tiers():
    for source in ("scheduling.k8s.io/priorityclass", ""):
        obj = v1beta1(queueName="acme.ml.nlp", priorityClassName="allot-p1", priorityClassSource=source)
        decision = judged(obj)
        assert decision.reason is Reason.WRONG_PRIORITY_CLASS, (source, decision)
        assert "spec.priorityClassName is 'PriorityClass/allot-p1'" in decision.message


def test_mutation_writes_v1beta1s_fields_and_validation_then_allows():
    bare = v1beta1()
    decision = judged(copy.deepcopy(bare), mutate=True)
    assert decision.allowed, decision.message
    paths = {p["path"]: p["value"] for p in decision.patch}
    assert paths["/spec/priorityClassName"] == "allot-p1"
    assert paths["/spec/priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
    assert paths["/spec/priority"] == 10000  # the CRD: "priority should not be nil when priorityClassName is set"
    assert "/spec/priorityClassRef" not in paths  # a field v1beta1 does not have: the API server would refuse it
    patched = jsonpatch.apply_patch(bare, list(decision.patch))
    assert judged(patched).allowed
    assert not judged(copy.deepcopy(patched), mutate=True).patch  # nothing left to set


def test_the_same_workload_in_v1beta2_still_reads_priority_class_ref():
    obj = v1beta1(queueName="acme.ml.nlp", priorityClassName="allot-p1",
                  priorityClassSource="kueue.x-k8s.io/workloadpriorityclass")  # fmt: skip
    obj["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    assert judged(obj).reason is Reason.WRONG_PRIORITY_CLASS  # v1beta2 has no priorityClassName: None is not P1's
