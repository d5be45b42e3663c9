"""Diffs on owned fields, and the sync plan."""

import copy
import json

from quotas.policy.kueue import compile_kueue
from quotas.policy.kueue.diff import Action, diff_object, plan_sync
from quotas.policy.kueue.target import object_key
from tests.quotas.policy.kueue.test_translate import tree


def as_server_returns(obj, revision="41"):
    """What a server hands back: our fields plus defaults, status and a managedFields entry."""
    back = copy.deepcopy(obj)
    back["metadata"].update(uid="u-1", resourceVersion="700", generation=1, creationTimestamp="2026-11-29T20:10:33Z")
    back["metadata"]["annotations"]["allot.dev/policy-revision"] = revision
    if back["kind"] == "ClusterQueue":
        back["spec"].setdefault("stopPolicy", "None")  # the server's defaults fill only what was not sent
        back["spec"].setdefault(
            "flavorFungibility", {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"}
        )
    back["metadata"]["managedFields"] = [
        {"manager": "allot", "operation": "Apply", "fieldsV1": {"f:spec": {f"f:{k}": {} for k in obj.get("spec", {})}}}
    ]
    return back


def test_an_object_as_applied_has_no_diff_despite_defaults_and_a_new_revision():
    for obj in compile_kueue(*tree()):
        assert diff_object(obj, as_server_returns(obj)) == [], obj["metadata"]["name"]


def test_quantities_compare_by_value():
    obj = next(o for o in compile_kueue(*tree()) if o["kind"] == "ClusterQueue")
    back = as_server_returns(obj)
    entry = back["spec"]["resourceGroups"][0]["flavors"][1]["resources"][0]
    entry["nominalQuota"] = "64000m"  # cpu 64 written another way
    assert diff_object(obj, back) == []


def test_a_kubectl_edit_shows_as_a_field_change():
    obj = next(
        o for o in compile_kueue(*tree()) if o["metadata"]["name"] == "acme.ml.nlp" and o["kind"] == "ClusterQueue"
    )
    back = as_server_returns(obj)
    back["spec"]["resourceGroups"][0]["flavors"][1]["resources"][1]["nominalQuota"] = "48"
    [change] = diff_object(obj, back)
    assert change.as_dict() == {
        "path": "spec.resourceGroups[0].flavors[1].resources[1].nominalQuota",
        "desired": "30",
        "actual": "48",
    }


def test_a_field_allot_no_longer_sets_is_a_removal():
    obj = next(
        o for o in compile_kueue(*tree()) if o["metadata"]["name"] == "acme.ml.nlp" and o["kind"] == "ClusterQueue"
    )
    back = as_server_returns(obj)
    desired = copy.deepcopy(obj)
    del desired["spec"]["namespaceSelector"]  # its namespaces were unbound
    [change] = diff_object(desired, back)
    assert (change.path, change.desired) == ("spec.namespaceSelector", None)


def test_fields_of_other_managers_are_not_ours_to_diff_unless_they_change_admission():
    obj = next(o for o in compile_kueue(*tree()) if o["kind"] == "ClusterQueue")
    back = as_server_returns(obj)
    back["metadata"]["labels"]["team"] = "someone-elses"
    back["spec"]["stopPolicy"] = "None"  # Kueue's default: neutral
    assert diff_object(obj, back) == []
    # issue #15.2: an admission check or a stop policy set out of band changes what gets admitted
    back["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "x"}]}
    back["spec"]["stopPolicy"] = "HoldAndDrain"
    assert [(c.path, c.desired, c.actual) for c in diff_object(obj, back)] == [
        ("spec.admissionChecksStrategy", None, {"admissionChecks": [{"name": "x"}]}),
        ("spec.stopPolicy", "None", "HoldAndDrain"),
    ]
    (plan,) = [p for p in plan_sync([obj], {object_key(obj): back}) if p.action is Action.UPDATE]
    assert plan.desired is not None and plan.desired["spec"]["stopPolicy"] == "None"  # an apply resets it
    assert "admissionChecksStrategy" not in plan.desired["spec"]  # absent is neutral: reported, not applied


def test_plan_creates_updates_keeps_and_deletes_in_order():
    objects = compile_kueue(*tree())
    actual = {object_key(o): as_server_returns(o) for o in objects}
    changed = next(k for k in actual if k[0] == "ClusterQueue")
    actual[changed]["spec"]["fairSharing"]["weight"] = "9"
    created = next(k for k in actual if k[0] == "LocalQueue")
    del actual[created]
    stale = [
        ("Cohort", "", "acme.old"),
        ("Cohort", "", "acme.old.team"),
        ("ClusterQueue", "", "acme.old.team.q"),
        ("LocalQueue", "gone", "acme.old.team.q"),
        ("ResourceFlavor", "", "t4"),
    ]
    for kind, ns, name in stale:
        actual[(kind, ns, name)] = {"kind": kind, "metadata": {"name": name, "namespace": ns}}
    plans = plan_sync(objects, actual)
    by_action = {a: [p.key for p in plans if p.action is a] for a in Action}
    assert by_action[Action.UPDATE] == [changed] and by_action[Action.CREATE] == [created]
    assert len(by_action[Action.UNCHANGED]) == len(objects) - 2
    assert by_action[Action.DELETE] == [
        ("LocalQueue", "gone", "acme.old.team.q"),
        ("ClusterQueue", "", "acme.old.team.q"),
        ("Cohort", "", "acme.old.team"),
        ("Cohort", "", "acme.old"),
        ("ResourceFlavor", "", "t4"),
    ]
    assert [p.action for p in plans][-5:] == [Action.DELETE] * 5


def test_plan_against_what_a_real_server_returned(fixtures):
    """The server's own answer to an apply (with defaults and managedFields) diffs clean
    against the request that produced it."""
    exchange = json.loads((fixtures / "k8s-api/02e-ssa-create-clusterqueue-201.json").read_text())
    assert diff_object(exchange["request"]["body"], exchange["response"]["body"]) == []
    edited = json.loads(
        (fixtures / "k8s-api/05b-get-clusterqueue-managedfields-after-kubectl-edit-200.json").read_text()
    )["response"]["body"]
    changes = diff_object(exchange["request"]["body"], edited)
    assert [c.path for c in changes] == ["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]
    assert (changes[0].desired, changes[0].actual) == ("32", "24")


def test_a_reordered_resource_list_is_an_order_change_not_a_quantity_change():
    """Issue #15.8: lists were compared by position, so a reorder showed as quantities changing."""
    obj = next(o for o in compile_kueue(*tree()) if o["kind"] == "ClusterQueue")
    back = as_server_returns(obj)
    resources = back["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    resources.reverse()
    names = [r["name"] for r in obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"]]
    assert [(c.path, c.desired, c.actual) for c in diff_object(obj, back)] == [
        ("spec.resourceGroups[0].flavors[0].resources (order)", names, list(reversed(names)))
    ]
