"""Objects in the version a cluster serves and back (v1beta1 for Kueue v0.13/v0.14). Pure."""

from quotas.policy.kueue import compile_kueue
from quotas.policy.kueue.convert import from_version, to_version
from tests.quotas.policy.kueue.test_translate import tree


def test_every_compiled_object_goes_to_v1beta1_and_comes_back_unchanged():
    objects = compile_kueue(*tree())
    for obj in objects:
        old = to_version(obj, "v1beta1")
        assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
        assert from_version(old) == obj
    queue = next(o for o in objects if o["kind"] == "ClusterQueue" and "cohortName" in o["spec"])
    old = to_version(queue, "v1beta1")["spec"]
    assert "cohortName" not in old and old["cohort"] == queue["spec"]["cohortName"]


def test_v1beta2_fungibility_values_are_spelled_as_v1beta1_spells_them():
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
        "spec": {"flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"}},
    }
    assert to_version(queue, "v1beta1")["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "Borrow",
        "whenCanPreempt": "Preempt",
    }
    assert from_version(to_version(queue, "v1beta1")) == queue
    assert to_version(queue, "v1beta2") == queue


def test_what_allot_owned_on_a_v1beta1_server_is_read_under_the_v1beta2_name():
    read = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {
            "name": "q",
            "managedFields": [
                {"manager": "allot", "operation": "Apply", "fieldsV1": {"f:spec": {"f:cohort": {}, "f:preemption": {}}}}
            ],
        },
        "spec": {"cohort": "acme"},
    }
    back = from_version(read)
    assert back["spec"] == {"cohortName": "acme"}
    assert back["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"] == {"f:cohortName": {}, "f:preemption": {}}
    assert read["spec"] == {"cohort": "acme"}  # not mutated
