"""What a cluster's Kueue serves, read from its CRDs (issue #30, part 6). Pure."""

import copy

import yaml

from quotas.kueue_crds import CRD_DIR
from quotas.policy.kueue.versions import fit_objects, served_kueue, version_problem


def crds():
    return [yaml.safe_load(f.read_text()) for f in sorted(CRD_DIR.glob("kueue.x-k8s.io_*.yaml"))]


def test_the_bundled_kueue_serves_both_versions_and_every_optional_field():
    served = served_kueue(crds())
    assert served.versions["ClusterQueue"] == ("v1beta1", "v1beta2")
    assert {"admissionScope", "fairSharing", "resourceGroups"} <= served.spec_fields["ClusterQueue"]
    assert "value" in served.spec_fields["WorkloadPriorityClass"]  # no spec: its top level
    assert version_problem(served, "west") is None
    queue = {"kind": "ClusterQueue", "spec": {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}}
    assert fit_objects([queue], served) == ([queue], [])


def test_no_kueue_and_a_v1beta1_only_kueue_are_refused_with_what_to_do():
    assert "serves no Kueue CRDs: install Kueue v0.15" in str(version_problem(served_kueue([]), "west"))
    old = copy.deepcopy(crds())
    for crd in old:
        crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    message = str(version_problem(served_kueue(old), "west"))
    assert message.startswith("west serves kueue.x-k8s.io v1beta1 only (Kueue v0.14 or older)")
    assert "Upgrade Kueue to v0.15" in message
    not_served = copy.deepcopy(crds())
    for crd in not_served:
        for v in crd["spec"]["versions"]:
            v["served"] = v["name"] != "v1beta2" or crd["spec"]["names"]["kind"] != "Cohort"
    assert "for Cohort" in str(version_problem(served_kueue(not_served), "west"))


def test_fields_an_older_v1beta2_schema_lacks_are_left_out_and_named():
    old = copy.deepcopy(crds())
    for crd in old:
        if crd["spec"]["names"]["kind"] == "LocalQueue":
            for v in crd["spec"]["versions"]:
                v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("fairSharing")
    local = {
        "kind": "LocalQueue",
        "metadata": {"name": "q"},
        "spec": {"clusterQueue": "q", "fairSharing": {"weight": "2"}},
    }
    fitted, notes = fit_objects([local, local], served_kueue(old))
    assert fitted == [{**local, "spec": {"clusterQueue": "q"}}] * 2 and "fairSharing" in local["spec"]  # not mutated
    assert notes == [
        "left out LocalQueue spec.fairSharing on 2 object(s): this cluster's Kueue does not serve it "
        "(newer Kueue versions do; upgrade it to have it enforced)"
    ]
