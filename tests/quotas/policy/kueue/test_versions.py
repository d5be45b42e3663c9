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


def test_a_v1beta1_only_kueue_is_written_in_v1beta1_and_no_kueue_is_refused_with_what_to_do():
    assert "serves no Kueue CRDs: install Kueue v0.13" in str(version_problem(served_kueue([]), "west"))
    old = copy.deepcopy(crds())
    for crd in old:
        crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    served = served_kueue(old)
    assert version_problem(served, "west") is None and served.version == "v1beta1"
    assert "objects written as v1beta1 — ClusterQueue spec.cohortName is written as spec.cohort" in str(served.note())
    assert served_kueue(crds()).version == "v1beta2" and served_kueue(crds()).note() is None
    not_served = copy.deepcopy(crds())
    for crd in not_served:
        for v in crd["spec"]["versions"]:
            v["served"] = crd["spec"]["names"]["kind"] != "Cohort"
    message = str(version_problem(served_kueue(not_served), "west"))
    assert "does not serve Cohort in one version Allot speaks" in message and "nothing was sent" in message


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
