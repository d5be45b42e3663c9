"""The admission decision core on a hand-built policy: every rule, its reason and its message."""

import copy
from typing import Any

import jsonpatch
import pytest

from admission.policy.decide import Reason, decide
from admission.policy.model import compile_policy
from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget
from quotas.policy.snapshot import Contract, Tier

A80, A40 = "west/a100-80gb", "west/a100-40gb"


def tree():
    """acme (a100-80gb 64, a100-40gb 32) → ml → nlp (16 + burst 8 on 80gb; 8 + 4 on 40gb) → llm"""
    b = TreeBuilder()
    b.flavor(A80, 64)
    b.flavor(A40, 32)
    b.contracts["std"] = Contract("std", 900, 60, 120, checkpoint_every_s=900)
    b.tiers.update(
        {
            "P1": Tier("P1", 10000, False, display_name="training"),
            "P2": Tier("P2", 1000, False, max_runtime_s=4 * 3600, display_name="interactive"),
            "P3": Tier("P3", 100, True, opportunistic=True, display_name="batch"),
        }
    )
    acme = b.unit("acme", UnitKind.ORGANISATION, contract="std")
    ml = b.unit("ml", UnitKind.DEPARTMENT, acme)
    nlp = b.unit("nlp", UnitKind.TEAM, ml)
    b.unit("llm", UnitKind.PROJECT, nlp)
    for unit, scale in ((acme, 4), (ml, 2), (nlp, 1)):
        b.quota(unit, A80, Resource.GPU, 16 * scale, 8 if unit == nlp else 0)
        b.quota(unit, A40, Resource.GPU, 8 * scale, 4 if unit == nlp else 0)
    return b, ml, nlp


def compiled(snapshot, nlp, namespaces=("nlp", "nlp-dev"), at=None):
    target = KueueTarget(
        "west",
        (KueueFlavor(A80, "a100-80gb", {"gpu": "a100-80gb"}), KueueFlavor(A40, "a100-40gb", {"gpu": "a100-40gb"})),
        {nlp: namespaces},
        revision=7,
        at=at,
    )
    return compile_policy(
        snapshot, target, members={nlp: frozenset({"alice"})}, allowed_tiers={}, flavor_memory={A80: 80, A40: 40}
    )


def policy():
    """The tree of :func:`tree`, namespaces nlp and nlp-dev bound to nlp."""
    b, _, nlp = tree()
    return compiled(b.build(), nlp)


LABELS = {
    "allot.dev/owner": "alice",
    "allot.dev/project": "llm",
    "allot.dev/tier": "P1",
    "allot.dev/contract": "std",
    "kueue.x-k8s.io/queue-name": "acme.ml.nlp",
    "kueue.x-k8s.io/priority-class": "allot-p1",
}


def job(gpus=2, parallelism=4, labels=None, annotations=None, **spec):
    pod = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    pod.update(spec.pop("pod", {}))
    metadata: dict[str, Any] = {
        "name": "train",
        "namespace": "nlp",
        "labels": dict(LABELS if labels is None else labels),
    }
    if annotations:
        metadata["annotations"] = annotations
    obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"parallelism": parallelism, "template": {"spec": pod}, **spec},
    }
    return obj


def request(obj, kind=("batch", "Job"), namespace="nlp", operation="CREATE"):
    return {
        "uid": "u-1",
        "kind": {"group": kind[0], "version": "v1", "kind": kind[1]},
        "namespace": namespace,
        "operation": operation,
        "object": obj,
    }


def test_a_complete_job_within_the_ceiling_is_allowed():
    decision = decide(policy(), request(job()))
    assert (decision.allowed, decision.reason, decision.unit) == (True, Reason.ALLOWED, "acme/ml/nlp")


@pytest.mark.parametrize(
    ("change", "reason", "fragment"),
    [
        (lambda o: o["metadata"]["labels"].pop("allot.dev/owner"), Reason.MISSING_LABEL, "allot.dev/owner missing"),
        (
            lambda o: o["metadata"]["labels"].update({"allot.dev/owner": "mallory"}),
            Reason.UNKNOWN_OWNER,
            "'mallory' is not a member of acme/ml/nlp",
        ),
        (
            lambda o: o["metadata"]["labels"].update({"allot.dev/project": "vision"}),
            Reason.UNKNOWN_PROJECT,
            "use one of: llm, nlp",
        ),
        (
            lambda o: o["metadata"]["labels"].update({"allot.dev/tier": "P0"}),
            Reason.TIER_NOT_ALLOWED,
            "allowed: P1, P2",
        ),
        (
            lambda o: o["metadata"]["labels"].update({"allot.dev/contract": "gold"}),
            Reason.WRONG_CONTRACT,
            "allot.dev/contract=std",
        ),
        (
            lambda o: o["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "other"}),
            Reason.WRONG_QUEUE,
            "go to LocalQueue 'acme.ml.nlp'",
        ),
        (
            lambda o: o["metadata"]["labels"].update({"kueue.x-k8s.io/priority-class": "allot-p3"}),
            Reason.WRONG_PRIORITY_CLASS,
            "tier P1 runs at 'allot-p1'",
        ),
    ],
)
def test_every_label_rule_denies_with_a_message_that_says_what_to_do(change, reason, fragment):
    obj = job()
    change(obj)
    decision = decide(policy(), request(obj))
    assert (decision.allowed, decision.reason) == (False, reason)
    assert fragment in decision.message


def test_a_job_that_could_never_fit_is_refused_with_the_numbers():
    decision = decide(policy(), request(job(gpus=4, parallelism=7)))  # 28 > 16 + 8 on any flavor
    assert decision.reason is Reason.EXCEEDS_CEILING
    assert "asks for 28 GPUs on any flavor" in decision.message and "more than 24" in decision.message
    pinned = job(gpus=2, parallelism=7, pod={"nodeSelector": {"gpu": "a100-40gb"}})  # 14 > 8 + 4
    decision = decide(policy(), request(pinned))
    assert decision.reason is Reason.EXCEEDS_CEILING and "14 GPUs on a100-40gb" in decision.message
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100-40gb"]}]}]
            }
        }
    }
    assert decide(policy(), request(job(gpus=2, parallelism=6, pod={"affinity": affinity}))).allowed  # 12 fits


def test_init_containers_and_requests_count_as_kubernetes_does():
    pod = {"initContainers": [{"name": "warmup", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}
    decision = decide(policy(), request(job(gpus=1, parallelism=4, pod=pod)))  # max(1, 8) × 4 = 32 > 24
    assert decision.reason is Reason.EXCEEDS_CEILING and "32 GPUs" in decision.message


def test_interactive_tier_needs_a_runtime_within_its_limit():
    labels = {**LABELS, "allot.dev/tier": "P2", "kueue.x-k8s.io/priority-class": "allot-p2"}
    assert decide(policy(), request(job(labels=labels))).reason is Reason.RUNTIME_REQUIRED
    long = decide(policy(), request(job(labels=labels, activeDeadlineSeconds=5 * 3600)))
    assert long.reason is Reason.RUNTIME_TOO_LONG and "above tier P2's limit of 4h" in long.message
    ok = decide(policy(), request(job(labels={**labels, "kueue.x-k8s.io/max-exec-time-seconds": "3600"})))
    assert ok.allowed


def test_opportunistic_tier_declares_checkpoints_within_the_contract():
    labels = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    assert decide(policy(), request(job(labels=labels))).reason is Reason.CHECKPOINT_REQUIRED
    slow = decide(policy(), request(job(labels=labels, annotations={"allot.dev/checkpoint-every": "1h"})))
    assert slow.reason is Reason.CHECKPOINT_TOO_SLOW and "at least every 15m" in slow.message
    grace = job(
        labels=labels, annotations={"allot.dev/checkpoint-every": "10m"}, pod={"terminationGracePeriodSeconds": 600}
    )
    assert decide(policy(), request(grace)).reason is Reason.GRACE_TOO_LONG
    declared = job(labels=labels, annotations={"allot.dev/checkpoint-every": "10m"})
    assert decide(policy(), request(declared), mutate=True).allowed  # the mutating webhook sets the grace
    # validation alone (mutation skipped: its failurePolicy is Ignore) refuses what mutation would have set
    # (issue #40.4): no grace, or the API server's default 30, on an opportunistic tier
    for grace_s in (None, 30):
        pod = {} if grace_s is None else {"terminationGracePeriodSeconds": grace_s}
        bare = job(labels=labels, annotations={"allot.dev/checkpoint-every": "10m"}, pod=pod)
        refused = decide(policy(), request(bare))
        assert refused.reason is Reason.GRACE_REQUIRED and "terminationGracePeriodSeconds: 60" in refused.message
    exact = job(
        labels=labels, annotations={"allot.dev/checkpoint-every": "10m"}, pod={"terminationGracePeriodSeconds": 60}
    )
    assert decide(policy(), request(exact)).allowed


def test_in_a_namespace_no_team_holds_only_gpu_requests_are_refused_and_a_setting_can_admit_them():
    """Issue #40.1: a DaemonSet's pod in gpu-operator (no accelerator) is never blocked; a GPU job there is refused
    naming the fix, or admitted with a warning under ALLOT_ADMISSION_UNGOVERNED_GPU=allow."""
    from dataclasses import replace

    plugin = {
        "metadata": {"name": "nvidia-device-plugin-x1", "ownerReferences": [{"kind": "DaemonSet", "name": "p"}]},
        "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin"}]},
    }
    decision = decide(policy(), request(plugin, kind=("", "Pod"), namespace="gpu-operator"))
    assert decision.allowed and decision.reason is Reason.NOT_CHECKED and "not governed" in decision.message
    malformed = {"metadata": {"name": "x"}, "spec": {"containers": "not a list"}}  # what it asks for is unknowable
    assert decide(policy(), request(malformed, kind=("", "Pod"), namespace="monitoring")).reason is Reason.MALFORMED
    refused = decide(policy(), request(job(), namespace="random"))
    assert refused.reason is Reason.NAMESPACE_UNBOUND and "asks for GPUs" in refused.message
    assert "bind the namespace to its team" in refused.message
    lenient = decide(replace(policy(), ungoverned_gpu="allow"), request(job(), namespace="random"))
    assert lenient.allowed and lenient.warnings and "not bound to any team" in lenient.warnings[0]


def test_unbound_namespaces_unknown_kinds_and_other_operations():
    assert decide(policy(), request(job(), namespace="random")).reason is Reason.NAMESPACE_UNBOUND
    assert decide(policy(), request(job(), kind=("apps", "Deployment"))).reason is Reason.UNSUPPORTED_KIND
    assert decide(policy(), request(job(), operation="DELETE")).allowed
    assert decide(policy(), request({"spec": {}})).reason is Reason.MALFORMED
    assert decide(policy(), request({"metadata": {}, "spec": {"parallelism": "x"}})).reason is Reason.MALFORMED


def test_over_specified_flavor_is_a_warning_not_a_denial():
    obj = job(
        gpus=1, parallelism=2, pod={"nodeSelector": {"gpu": "a100-80gb"}}, annotations={"allot.dev/gpu-memory-gb": "35"}
    )
    decision = decide(policy(), request(obj))
    assert decision.allowed and len(decision.warnings) == 1
    assert "a100-40gb would do" in decision.warnings[0] and len(decision.warnings[0]) <= 120


def apply(decision, obj):
    return jsonpatch.apply_patch(obj, list(decision.patch))


def test_mutate_fills_in_queue_tier_priority_contract_and_validate_then_allows():
    bare = job(labels={"allot.dev/owner": "alice", "allot.dev/project": "llm"})
    assert decide(policy(), request(copy.deepcopy(bare))).reason is Reason.MISSING_LABEL
    # the default tier is the lowest allowed (P3, opportunistic): a cadence it cannot invent
    refused = decide(policy(), request(copy.deepcopy(bare)), mutate=True)
    assert refused.reason is Reason.CHECKPOINT_REQUIRED and refused.patch == ()
    bare["metadata"]["annotations"] = {"allot.dev/checkpoint-every": "10m"}
    mutated = decide(policy(), request(copy.deepcopy(bare)), mutate=True)
    assert mutated.allowed
    patched = apply(mutated, bare)
    labels = patched["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "acme.ml.nlp" and labels["allot.dev/contract"] == "std"
    assert labels["allot.dev/tier"] == "P3" and labels["kueue.x-k8s.io/priority-class"] == "allot-p3"
    assert patched["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    assert decide(policy(), request(patched)).allowed  # what mutate fixed, validate allows


def test_mutate_sets_runtime_and_grace_and_the_result_validates():
    labels = {**LABELS, "allot.dev/tier": "P2", "kueue.x-k8s.io/priority-class": "allot-p2"}
    obj = job(labels=labels)
    patched = apply(decide(policy(), request(copy.deepcopy(obj)), mutate=True), obj)
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == "14400"
    assert decide(policy(), request(patched)).allowed
    labels = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    obj = job(
        labels=labels, annotations={"allot.dev/checkpoint-every": "15m"}, pod={"terminationGracePeriodSeconds": 900}
    )
    # mutate adds, never replaces (a replace is refused on a Pod UPDATE and on a Job's template):
    # a grace period above the contract's is refused with the number to set instead
    refused = decide(policy(), request(copy.deepcopy(obj)), mutate=True)
    assert refused.reason is Reason.GRACE_TOO_LONG and "set it to at most 60" in refused.message
    del obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    patched = apply(decide(policy(), request(copy.deepcopy(obj)), mutate=True), obj)
    assert patched["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    assert decide(policy(), request(patched)).allowed


def test_an_object_without_labels_gets_a_labels_map():
    obj = job(labels={})
    del obj["metadata"]["labels"]
    decision = decide(policy(), request(copy.deepcopy(obj)), mutate=True)
    assert decision.reason is Reason.MISSING_LABEL  # owner and project cannot be guessed
