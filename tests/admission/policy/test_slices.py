"""Admission counts MIG slices and shared GPUs by their weight in GPU-equivalents (issue #45.4)."""

from __future__ import annotations

import pytest

from admission.policy.decide import Reason, decide
from admission.policy.model import compile_policy
from quotas.policy import Resource
from quotas.policy.kueue import KueueFlavor, KueueTarget
from quotas.policy.sharing import flavor_sharing
from tests.admission.policy.test_decide import A40, A80, job, request, tree

MIG = "west/h100-mig"
H100 = flavor_sharing("mig", accelerator_model="NVIDIA H100 80GB HBM3", memory_gb=80, profiles=["1g.10gb", "3g.40gb"])


def policy(nlp_mig=(1, 1)):
    """test_decide's tree, plus an H100 MIG flavor (1g.10gb, 3g.40gb) where nlp holds 1 GPU-equivalent with a
    burst of 1 (so it may never hold more than 2)."""
    b, ml, nlp = tree()
    b.flavor(MIG, 4)
    acme = b.units[ml].parent_id
    for unit in (acme, ml):
        b.quota(unit, MIG, Resource.GPU, 4)
    b.quota(nlp, MIG, Resource.GPU, *nlp_mig)
    target = KueueTarget(
        "west",
        (
            KueueFlavor(A80, "a100-80gb", {"gpu": "a100-80gb"}),
            KueueFlavor(A40, "a100-40gb", {"gpu": "a100-40gb"}),
            KueueFlavor(MIG, "h100-mig", {"gpu": "h100-mig"}, sharing=H100),
        ),
        {nlp: ("nlp",)},
        revision=7,
    )
    return compile_policy(
        b.build(),
        target,
        members={nlp: frozenset({"alice"})},
        allowed_tiers={},
        flavor_memory={A80: 80, A40: 40, MIG: 80},
    )


def sliced(resource: str, per_pod: int, pods: int, **spec):
    obj = job(gpus=0, parallelism=pods, **spec)
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {resource: str(per_pod)}}
    return obj


def test_slices_are_counted_by_weight_against_the_ceiling_in_equivalents():
    rules = policy()
    assert rules.namespaces["nlp"].ceilings["h100-mig"] == 2
    fourteen = decide(rules, request(sliced("nvidia.com/mig-1g.10gb", 1, 14)))  # 14 × 1/7 = 2
    assert fourteen.allowed, fourteen.message
    fifteen = decide(rules, request(sliced("nvidia.com/mig-1g.10gb", 1, 15)))  # 15/7 > 2
    assert fifteen.reason is Reason.EXCEEDS_CEILING
    assert "asks for 2.14 GPU-equivalents (15 × nvidia.com/mig-1g.10gb) on h100-mig" in fifteen.message
    assert "can never hold more than 2 there" in fifteen.message
    four = decide(rules, request(sliced("nvidia.com/mig-3g.40gb", 1, 4)))  # 4 × 1/2 = 2
    assert four.allowed, four.message
    five = decide(rules, request(sliced("nvidia.com/mig-3g.40gb", 1, 5)))
    assert five.reason is Reason.EXCEEDS_CEILING and "2.5 GPU-equivalents" in five.message


def test_mixed_profiles_in_one_pod_add_up():
    obj = sliced("nvidia.com/mig-1g.10gb", 7, 1)  # 1 equivalent
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] = "2"  # 1 more
    assert decide(policy(), request(obj)).allowed
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] = "3"
    refused = decide(policy(), request(obj))
    assert refused.reason is Reason.EXCEEDS_CEILING and "2.5 GPU-equivalents" in refused.message
    assert "7 × nvidia.com/mig-1g.10gb, 3 × nvidia.com/mig-3g.40gb" in refused.message


def test_a_profile_the_flavor_does_not_offer_is_refused_with_those_it_may_use():
    refused = decide(policy(), request(sliced("nvidia.com/mig-2g.20gb", 1, 1)))
    assert refused.reason is Reason.PROFILE_NOT_OFFERED
    assert "asks for nvidia.com/mig-2g.20gb, which no flavor of cluster west offers" in refused.message
    assert "h100-mig (mig) offers 1g.10gb = 0.14 GPU, 3g.40gb = 0.5 GPU" in refused.message
    assert "whole GPUs (nvidia.com/gpu) on a100-40gb, a100-80gb" in refused.message


def test_whole_gpus_never_count_against_a_shared_flavor():
    # pinned to the MIG flavor's nodes, a whole GPU would wait forever: they offer only slices
    pinned = job(gpus=1, parallelism=1, pod={"nodeSelector": {"gpu": "h100-mig"}})
    refused = decide(policy(), request(pinned))
    assert refused.reason is Reason.PIN_MISMATCH and "asks for nvidia.com/gpu" in refused.message
    instead = "pin a flavor that offers it instead: a100-40gb (gpu=a100-40gb); a100-80gb (gpu=a100-80gb)"
    assert instead in refused.message
    # unpinned, whole GPUs are judged against the whole flavors' ceilings only (a100-80gb: 24), never the
    # MIG flavor's equivalents
    assert decide(policy(nlp_mig=(30, 0)), request(job(gpus=1, parallelism=24))).allowed
    over = decide(policy(nlp_mig=(30, 0)), request(job(gpus=1, parallelism=25)))
    assert over.reason is Reason.EXCEEDS_CEILING and "25 GPUs on any of a100-40gb, a100-80gb" in over.message


@pytest.mark.parametrize("resource", ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"])
def test_a_slice_pinned_elsewhere_would_wait_forever(resource):
    pinned = sliced(resource, 1, 1, pod={"nodeSelector": {"gpu": "a100-80gb"}})
    refused = decide(policy(), request(pinned))
    assert refused.reason is Reason.PIN_MISMATCH  # the pin matches a whole flavor, which offers no slices
    assert refused.message.endswith("pin a flavor that offers it instead: h100-mig (gpu=h100-mig)")


def test_time_sliced_shares_count_one_share_each():
    b, ml, nlp = tree()
    b.flavor("west/t4-shared", 2)
    for unit in (b.units[ml].parent_id, ml, nlp):
        b.quota(unit, "west/t4-shared", Resource.GPU, 1)
    shared = flavor_sharing("time-slicing", shares=4)
    target = KueueTarget("west", (KueueFlavor("west/t4-shared", "t4-shared", sharing=shared),), {nlp: ("nlp",)})
    rules = compile_policy(b.build(), target, members={nlp: frozenset({"alice"})}, allowed_tiers={}, flavor_memory={})
    assert decide(rules, request(sliced("nvidia.com/gpu.shared", 1, 4))).allowed  # 4 × 1/4 = 1
    refused = decide(rules, request(sliced("nvidia.com/gpu.shared", 1, 5)))
    assert refused.reason is Reason.EXCEEDS_CEILING and "1.25 GPU-equivalents" in refused.message


def test_mutation_pins_unpinned_slices_to_the_flavor_that_offers_them():
    """Kueue counts every shared flavor's slices in one currency: unpinned, a slice could be assigned to a flavor
    whose nodes do not offer it. The mutating webhook pins it; a pinned one is left alone."""
    import jsonpatch

    obj = sliced("nvidia.com/mig-1g.10gb", 1, 2)
    decision = decide(policy(), request(obj), mutate=True)
    assert decision.allowed, decision.message
    pin = {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"gpu": "h100-mig"}}
    assert pin in decision.patch
    patched = jsonpatch.apply_patch(obj, list(decision.patch))
    again = decide(policy(), request(patched), mutate=True)
    assert not [p for p in again.patch if "nodeSelector" in p["path"]]  # idempotent
    whole = decide(policy(), request(job(gpus=1, parallelism=1)), mutate=True)
    assert not [p for p in whole.patch if "nodeSelector" in p["path"]]  # whole GPUs: any whole flavor
    other = sliced("nvidia.com/mig-1g.10gb", 1, 1, pod={"nodeSelector": {"zone": "b"}})
    added = decide(policy(), request(other), mutate=True)
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector/gpu", "value": "h100-mig"} in added.patch


def test_a_slice_on_a_cluster_without_shared_flavors_names_the_fix():
    from tests.admission.policy.test_decide import policy as whole_policy

    refused = decide(whole_policy(), request(sliced("nvidia.com/mig-1g.10gb", 1, 1)))
    assert refused.reason is Reason.UNGOVERNED_ACCELERATOR
    assert (
        "ask a platform admin for a flavor that offers it (sharing: mig, mps or time-slicing) or to map it to a "
        "flavor (ALLOT_ADMISSION_ACCELERATORS)"
    ) in refused.message
