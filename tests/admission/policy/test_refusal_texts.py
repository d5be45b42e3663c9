"""Refusal texts people can act on, and requests counted as Kueue counts them: no Python ``None``, the flavor
that would fit named, whom to ask named, Kueue's reach said as such, a RayJob's submitter pod counted, whole
GPUs and slices in one pod refused by their own rule."""

from __future__ import annotations

import copy
from dataclasses import replace

import jsonpatch

from admission.policy.decide import Reason, decide
from admission.policy.model import compile_policy
from tests.admission.policy.test_decide import A40, A80, LABELS, job, policy, request, tree
from tests.admission.policy.test_ray_chain import ray_job
from tests.admission.policy.test_slices import policy as mig_policy
from tests.admission.policy.test_slices import sliced


def led_policy():
    b, ml, nlp = tree()
    from quotas.policy.kueue import KueueFlavor, KueueTarget

    target = KueueTarget(
        "west",
        (KueueFlavor(A80, "a100-80gb", {"gpu": "a100-80gb"}), KueueFlavor(A40, "a100-40gb", {"gpu": "a100-40gb"})),
        {nlp: ("nlp",)},
    )
    return compile_policy(
        b.build(), target, members={nlp: frozenset({"alice"})}, allowed_tiers={}, flavor_memory={},
        leads={ml: frozenset({"head-ml"})},
    )  # fmt: skip


def test_a_missing_queue_label_is_said_missing_not_none():
    labels = {k: v for k, v in LABELS.items() if k != "kueue.x-k8s.io/queue-name"}
    decision = decide(policy(), request(job(labels=labels)))
    assert decision.reason is Reason.WRONG_QUEUE
    assert "label kueue.x-k8s.io/queue-name is missing" in decision.message and "None" not in decision.message


def test_refusals_name_whom_to_ask():
    over = decide(led_policy(), request(job(gpus=8, parallelism=4)))  # 32 > nlp's 24
    assert over.reason is Reason.EXCEEDS_CEILING
    assert over.message.endswith("or request a larger quota (ask head-ml (lead of acme/ml))")
    assert "(guarantee + burst)" in over.message
    stranger = decide(led_policy(), request(job(labels={**LABELS, "allot.dev/owner": "mallory"})))
    assert "ask head-ml (lead of acme/ml) to add you in Allot" in stranger.message


def test_no_quota_on_a_flavor_names_the_flavors_it_has():
    p = policy()
    rule = p.namespaces["nlp"]
    none_on_40 = replace(p, namespaces={"nlp": replace(rule, ceilings={**rule.ceilings, "a100-40gb": 0})})
    pinned = job(gpus=1, parallelism=1, pod={"nodeSelector": {"gpu": "a100-40gb"}})
    decision = decide(none_on_40, request(pinned))
    assert decision.reason is Reason.EXCEEDS_CEILING
    assert "has no quota there: it would wait forever; use a flavor it has quota on: a100-80gb" in decision.message


def test_a_ceiling_that_is_kueues_reach_is_said_so():
    p = policy()
    rule = p.namespaces["nlp"]
    reach = replace(rule, ceilings={"a100-80gb": 20, "a100-40gb": 12}, reach_limited=frozenset({"a100-80gb"}))
    pinned = job(gpus=21, parallelism=1, pod={"nodeSelector": {"gpu": "a100-80gb"}})
    decision = decide(replace(p, namespaces={"nlp": reach}), request(pinned))
    assert "can never hold more than 20 there (what Kueue can ever admit to its queue" in decision.message
    assert "guarantee + burst" not in decision.message


def test_a_checkpoint_every_0s_is_said_as_never():
    p3 = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    decision = decide(policy(), request(job(labels=p3, annotations={"allot.dev/checkpoint-every": "0s"})))
    assert decision.reason is Reason.CHECKPOINT_TOO_SLOW
    assert "allot.dev/checkpoint-every='0s' says it never checkpoints" in decision.message
    assert "checkpoints every 0s" not in decision.message


def test_a_fractional_gpu_names_the_slices_a_cluster_with_mig_offers():
    half = job(gpus=1, parallelism=1)
    half["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "500m"}}
    with_mig = decide(mig_policy(), request(half))
    assert with_mig.reason is Reason.FRACTIONAL_DEVICE
    assert "ask for a slice instead (nvidia.com/mig-1g.10gb on h100-mig; nvidia.com/mig-3g.40gb on h100-mig)" in (
        with_mig.message
    )
    assert "does not offer" not in with_mig.message
    without = decide(policy(), request(half))
    assert "offers no shared GPUs (no MIG, MPS or time-sliced flavor): ask for 1" in without.message


def test_a_rayjobs_submitter_pod_is_counted_as_kueue_counts_it():
    workers = ray_job(labels={**LABELS, "allot.dev/tier": "P1"}, gpus=2, replicas=12)  # 24: nlp's ceiling
    assert decide(policy(), request(workers, kind=("ray.io", "RayJob"))).allowed
    submitter = copy.deepcopy(workers)
    submitter["spec"]["submitterPodTemplate"] = {
        "spec": {"containers": [{"name": "submit", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }
    refused = decide(policy(), request(submitter, kind=("ray.io", "RayJob")))
    assert refused.reason is Reason.EXCEEDS_CEILING and "asks for 25 GPUs" in refused.message
    # in HTTPMode KubeRay runs no submitter pod: nothing more is held
    submitter["spec"]["submissionMode"] = "HTTPMode"
    assert decide(policy(), request(submitter, kind=("ray.io", "RayJob"))).allowed


def test_whole_gpus_and_a_slice_in_one_pod_are_refused_and_never_pinned():
    both = sliced("nvidia.com/mig-1g.10gb", 1, 1)
    both["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    mutated = decide(mig_policy(), request(copy.deepcopy(both)), mutate=True)
    assert not [p for p in mutated.patch if "nodeSelector" in p["path"]]  # no pin that could never fit
    obj = jsonpatch.apply_patch(both, list(mutated.patch))
    refused = decide(mig_policy(), request(obj))
    assert refused.reason is Reason.PROFILE_NOT_OFFERED
    assert "in one pod, but Kueue gives a pod one flavor for all of them" in refused.message


def test_a_pod_asking_for_nothing_the_queues_cover_is_not_judged_by_its_pin():
    """Kueue assigns no flavor to a pod set that asks for no resource its ClusterQueue covers (so it is admitted
    whatever its node selector, as the differential suite saw on the real Kueue); one that asks for a covered
    resource with a pin no flavor satisfies waits forever."""
    empty = job(gpus=1, parallelism=1, pod={"nodeSelector": {"gpu": "h100"}})
    empty["spec"]["template"]["spec"]["containers"][0]["resources"] = {}
    assert decide(policy(), request(empty)).allowed
    zero = job(gpus=0, parallelism=1, pod={"nodeSelector": {"gpu": "h100"}})  # nvidia.com/gpu: 0 is covered
    assert decide(policy(), request(zero)).reason is Reason.UNKNOWN_FLAVOR


def test_an_update_adding_the_missing_checkpoint_is_not_refused_for_the_grace_it_left_as_it_was():
    from tests.admission.policy.test_kueue_machinery import update

    p3 = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    old = job(labels=p3)  # no checkpoint, and the grace the API server defaulted (not the contract's)
    old["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"allot.dev/checkpoint-every": "15m"}
    assert decide(policy(), update(old, new)).allowed
    # creating it as it now is still needs the contract's grace (the mutating webhook sets it)
    assert decide(policy(), request(copy.deepcopy(new))).reason is Reason.GRACE_REQUIRED
