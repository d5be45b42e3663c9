"""Validation before any apply: the real CRD schemas and CEL rules, and Kueue's webhook-only rules."""

import copy
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from quotas.policy import Quota, Resource
from quotas.policy.capacity import reclaimable
from quotas.policy.invariants import check_quota_edits, validate_tree
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.kueue.problems import Source
from quotas.policy.kueue.validate import validate_objects
from quotas.policy.kueue.webhook import check_webhook_rules
from tests.quotas.policy.kueue.test_translate import tree
from tests.quotas.policy.test_properties import FLAVORS, edits, trees


def test_translated_objects_pass_every_check(crd_schemas):
    assert validate_objects(compile_kueue(*tree()), crd_schemas) == []


@pytest.mark.parametrize(
    "fixture",
    [
        "06a-ssa-invalid-borrowinglimit-without-cohort-422.json",
        "06b-ssa-invalid-reclaim-never-borrow-lowerpriority-422.json",
        "06c-ssa-invalid-flavor-fewer-resources-than-covered-422.json",
    ],
)
def test_cel_problems_match_what_the_real_api_server_said(crd_schemas, fixtures, fixture):
    exchange = json.loads((fixtures / "k8s-api" / fixture).read_text())
    [problem] = crd_schemas.validate(exchange["request"]["body"])
    [cause] = exchange["response"]["body"]["details"]["causes"]
    assert (problem.field, problem.message, problem.source) == (cause["field"], cause["message"], Source.CEL)


@pytest.mark.parametrize(
    "fixture", ["06d-ssa-unknown-field-strict-500.json", "06g-post-create-unknown-field-strict-400.json"]
)
def test_unknown_fields_are_refused_like_strict_field_validation(crd_schemas, fixtures, fixture):
    exchange = json.loads((fixtures / "k8s-api" / fixture).read_text())
    [problem] = crd_schemas.validate(exchange["request"]["body"])
    assert problem.field == "spec.cohort" and "unknown field" in problem.message
    assert "spec.cohort" in exchange["response"]["body"]["message"]


def test_every_captured_valid_apply_passes(crd_schemas, fixtures):
    bodies = [json.loads(p.read_text())["request"]["body"] for p in sorted((fixtures / "k8s-api").glob("02*"))]
    kueue = [b for b in bodies if b["apiVersion"].startswith("kueue")]
    assert len(kueue) == 7
    assert [str(p) for b in kueue for p in crd_schemas.validate(b)] == []


def _cq(objects):
    return next(o for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "acme.ml.nlp")


def test_schema_checks_types_enums_patterns_and_required(crd_schemas):
    objects = compile_kueue(*tree())
    cq = copy.deepcopy(_cq(objects))
    cq["spec"]["queueingStrategy"] = "Fastest"
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    del cq["spec"]["resourceGroups"][0]["flavors"][0]["name"]
    cq["metadata"]["name"] = "Not_Valid"
    fields = {p.field: p.message for p in crd_schemas.validate(cq)}
    assert "Unsupported value" in fields["spec.queueingStrategy"]
    assert "should match" in fields["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]
    assert fields["spec.resourceGroups[0].flavors[0].name"] == "Required value"
    assert "RFC 1123" in fields["metadata.name"]


def test_transition_rules_run_only_on_update(crd_schemas):
    objects = compile_kueue(*tree())
    lq = next(o for o in objects if o["kind"] == "LocalQueue")
    moved = copy.deepcopy(lq)
    moved["spec"]["clusterQueue"] = "acme.ops"
    assert crd_schemas.validate(moved) == []  # a create: no oldSelf
    [problem] = crd_schemas.validate(moved, old=lq)
    assert (problem.field, problem.message) == ("spec.clusterQueue", "Invalid value: field is immutable")


def test_webhook_only_rules(crd_schemas):
    objects = copy.deepcopy(compile_kueue(*tree()))
    cq = _cq(objects)
    gpu = cq["spec"]["resourceGroups"][0]["flavors"][1]["resources"][1]
    gpu["lendingLimit"] = "31"  # nominal 30
    cpu = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    cpu["nominalQuota"] = "-1"
    cq["spec"]["fairSharing"]["weight"] = "0.0000000001"
    root = next(o for o in objects if o["metadata"]["name"] == "acme" and o["kind"] == "Cohort")
    root["spec"]["parentName"] = "acme.ml.vision"  # a cycle
    root_limits = next(o for o in objects if o["metadata"]["name"] == "acme.ops" and o["kind"] == "Cohort")
    del root_limits["spec"]["parentName"]  # limits without a parent
    found = {(p.name, p.field, p.message) for p in check_webhook_rules(objects)}
    assert (
        "acme.ml.nlp",
        "spec.resourceGroups[0].flavors[1].resources[1].lendingLimit",
        "must be less than or equal to the nominalQuota",
    ) in found
    assert (
        "acme.ml.nlp",
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "Invalid value: '-1': must be a non-negative quantity",
    ) in found
    assert ("acme.ml.nlp", "spec.fairSharing.weight", "When not 0, weight must be > 10e-9") in found
    assert any(name == "acme" and "cohort cycle" in message for name, _, message in found)
    assert any(name == "acme.ops" and message == "must be nil when parent is empty" for name, _, message in found)
    # the CRD alone accepts the lendingLimit above nominal: only the webhook rule catches it
    assert not [p for p in crd_schemas.validate(cq) if "lendingLimit" in p.field]


def test_resources_must_follow_covered_order_and_references_must_exist():
    objects = copy.deepcopy(compile_kueue(*tree()))
    cq = _cq(objects)
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["resources"].reverse()
    flavor["name"] = "h100"
    messages = [p.message for p in check_webhook_rules(objects) if p.name == "acme.ml.nlp"]
    assert any("must match the name in coveredResources" in m for m in messages)
    assert any("ResourceFlavor 'h100' is not among the objects applied" in m for m in messages)


def _allocate(snapshot, data):
    """A random valid allocation, top-down: each child gets a random part of its share of the parent."""
    quotas = dict(snapshot.quotas)
    pending = [(root, None) for root in snapshot.roots()]
    while pending:
        uid, parent = pending.pop()
        for flavor in FLAVORS:
            for resource in (Resource.GPU, Resource.CPU):
                if parent is None:
                    cap = (reclaimable(snapshot, flavor, resource) or 0) // max(1, len(snapshot.roots()))
                    g, ceiling = cap, cap
                else:
                    p = quotas.get((parent, flavor, resource), Quota())
                    share = p.guarantee // max(1, len(snapshot.children.get(parent, ())))
                    g = data.draw(st.integers(0, share))
                    ceiling = p.ceiling
                b = data.draw(st.integers(0, max(0, ceiling - g)))
                quotas[(uid, flavor, resource)] = Quota(g, b, data.draw(st.integers(0, g)))
        pending.extend((child, uid) for child in snapshot.children.get(uid, ()))
    return replace(snapshot, quotas=quotas)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(tree=trees(), steps=st.lists(edits, min_size=1, max_size=8), data=st.data())
def test_any_tree_the_core_accepts_compiles_to_valid_objects(crd_schemas, tree, steps, data):
    snapshot = _allocate(tree, data)
    assert validate_tree(snapshot) == []
    for step in steps:
        proposal = {(u, f, r): Quota(g, b, lend) for u, f, r, g, b, lend in step if u in snapshot.units}
        if proposal and not check_quota_edits(snapshot, proposal):
            snapshot = replace(snapshot, quotas={**snapshot.quotas, **proposal})
    units = sorted(snapshot.units)
    bound = data.draw(st.lists(st.sampled_from(units), unique=True, max_size=len(units)))
    target = KueueTarget(
        "c",
        tuple(KueueFlavor(k, k.split("/")[1], {"pool": k.split("/")[1]}) for k in FLAVORS),
        {uid: (f"ns-{uid}",) for uid in bound},
        revision=1,
    )
    objects = compile_kueue(snapshot, target)
    queues = sum(o["kind"] in ("ClusterQueue", "Cohort") for o in objects)
    event(f"cohorts + cluster queues: {'0' if not queues else '1-3' if queues < 4 else '4+'}")
    event("with resource groups" if any(o.get("spec", {}).get("resourceGroups") for o in objects) else "no quota")
    assert [str(p) for p in validate_objects(objects, crd_schemas)] == []
