"""Kueue's flavor-matching rule (quotas.policy.placement), case by case: every key any flavor of the group
carries counts, a flavor without a kept key fails the positive operators and passes the negative ones, a term
left with no kept expression drops the affinity, and a flavor's NoSchedule/NoExecute taints must be tolerated."""

from __future__ import annotations

import pytest

from quotas.policy.placement import FlavorTaints, holds, matching_flavors, tolerates

# as the demo has them: whole flavors named by allot.dev/flavor, the MIG flavor by the GPU operator's label only
FLAVORS = {
    "a100": {"allot.dev/flavor": "a100", "gpu.count": "8"},
    "h100": {"allot.dev/flavor": "h100", "gpu.count": "4"},
    "h100-mig": {"nvidia.com/mig.strategy": "mixed"},
}


def affinity(*terms):
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": k, "operator": op, "values": list(v)} for k, op, v in term]}
                        for term in terms
                    ]
                }
            }
        }
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, None),
        # a selector on a key the MIG flavor lacks rules it out (the rule the webhook missed)
        ({"nodeSelector": {"allot.dev/flavor": "a100"}}, ("a100",)),
        # a label no node has: nothing matches
        ({"nodeSelector": {"allot.dev/flavor": "h100-mig"}}, ()),
        ({"nodeSelector": {"nvidia.com/mig.strategy": "mixed"}}, ("h100-mig",)),
        # keys no flavor carries are the node scheduler's business, not Kueue's
        ({"nodeSelector": {"kubernetes.io/arch": "amd64"}}, None),
        (affinity([("allot.dev/flavor", "In", ["a100", "h100"])]), ("a100", "h100")),
        (affinity([("allot.dev/flavor", "NotIn", ["a100"])]), ("h100", "h100-mig")),
        (affinity([("allot.dev/flavor", "Exists", [])]), ("a100", "h100")),
        (affinity([("allot.dev/flavor", "DoesNotExist", [])]), ("h100-mig",)),
        (affinity([("gpu.count", "Gt", ["4"])]), ("a100",)),
        (affinity([("gpu.count", "Lt", ["8"])]), ("h100",)),
        (affinity([("gpu.count", "Gt", ["many"])]), ()),  # not an integer: Kubernetes matches nothing
        # ORed terms
        (
            affinity([("allot.dev/flavor", "In", ["a100"])], [("nvidia.com/mig.strategy", "In", ["mixed"])]),
            ("a100", "h100-mig"),
        ),
        # a term with no key of the group drops the affinity whole: any flavor
        (affinity([("allot.dev/flavor", "In", ["a100"])], [("topology.kubernetes.io/zone", "In", ["z1"])]), None),
        # selector AND affinity
        ({"nodeSelector": {"allot.dev/flavor": "a100"}, **affinity([("gpu.count", "Lt", ["8"])])}, ()),
        (affinity([("allot.dev/flavor", "Bogus", ["a100"])]), ()),
    ],
)
def test_kueues_rule(spec, expected):
    assert matching_flavors(spec, FLAVORS) == expected


def test_a_missing_key_passes_only_the_negative_operators():
    for op, values, expected in (
        ("=", ("x",), False),
        ("In", ("x",), False),
        ("NotIn", ("x",), True),
        ("Exists", (), False),
        ("DoesNotExist", (), True),
        ("Gt", ("1",), False),
        ("Lt", ("1",), False),
    ):
        assert holds({}, ("k", op, values)) is expected, op


TAINTED = {"spot": FlavorTaints(({"key": "spot", "value": "true", "effect": "NoSchedule"},))}


def test_an_untolerated_taint_rules_a_flavor_out():
    flavors = {"spot": {"pool": "spot"}, "reserved": {"pool": "reserved"}}
    assert matching_flavors({}, flavors, TAINTED) == ("reserved",)
    tolerating = {"tolerations": [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}
    assert matching_flavors(tolerating, flavors, TAINTED) is None
    # the flavor's own tolerations count as the pod's (Kueue adds them)
    own = {"spot": FlavorTaints(TAINTED["spot"].taints, ({"key": "spot", "operator": "Exists"},))}
    assert matching_flavors({}, flavors, own) is None
    # PreferNoSchedule never keeps a pod off
    soft = {"spot": FlavorTaints(({"key": "spot", "effect": "PreferNoSchedule"},))}
    assert matching_flavors({}, flavors, soft) is None


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"operator": "Exists"}, True),  # an empty key with Exists tolerates everything
        ({"key": "spot", "operator": "Exists"}, True),
        ({"key": "spot", "value": "true"}, True),  # Equal is the default
        ({"key": "spot", "value": "false"}, False),
        ({"key": "spot", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_kubernetes_toleration_rule(toleration, expected):
    assert tolerates(toleration, {"key": "spot", "value": "true", "effect": "NoSchedule"}) is expected
