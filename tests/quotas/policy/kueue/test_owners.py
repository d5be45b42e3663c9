"""Someone else setting the quotas Allot compiles (issue #30, part 4), on a ClusterQueue a real
kube-apiserver returned after a `kubectl edit` (tests/fixtures/k8s-api/05b). Pure."""

import copy
import json
from pathlib import Path

from quotas.policy.kueue.owners import quota_conflicts

FIXTURE = (
    Path(__file__).resolve().parents[3]
    / "fixtures"
    / "k8s-api"
    / "05b-get-clusterqueue-managedfields-after-kubectl-edit-200.json"
)


def recorded():
    return json.loads(FIXTURE.read_text())["response"]["body"]


def test_a_persons_kubectl_edit_is_drift_not_a_conflict():
    assert quota_conflicts([recorded()]) == []


def test_a_controller_owning_the_quota_and_dynamic_quota_orchestration_are_conflicts():
    argo = copy.deepcopy(recorded())
    argo["metadata"]["managedFields"][1]["manager"] = "argocd-application-controller"
    [conflict] = quota_conflicts([argo])
    assert (conflict.kind, conflict.name, conflict.who) == (
        "ClusterQueue",
        argo["metadata"]["name"],
        "argocd-application-controller",
    )
    dqo = copy.deepcopy(recorded())
    dqo["status"] = {"effectiveQuotas": [{"name": "on-demand", "resources": [{"name": "cpu", "total": "3"}]}]}
    [conflict] = quota_conflicts([dqo])
    assert conflict.who == "Kueue's DynamicQuotaOrchestration" and "feature gate off" in conflict.message
    other = copy.deepcopy(argo)
    other["kind"] = "LocalQueue"  # no quota of its own
    assert quota_conflicts([other]) == []
