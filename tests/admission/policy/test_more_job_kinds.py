"""MPIJob, TFJob and LeaderWorkerSet are judged like the other job kinds Kueue integrates: their devices counted
as their pods run at once, their labels completed by the mutating webhook, and the Workload Kueue creates for
one judged as part of it (devices only) — it used to be judged in full and refused for labels no user could add
to it."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from admission.policy.decide import Reason, decide
from tests.admission.policy.test_decide import LABELS, policy, request
from tests.admission.policy.test_kueue_machinery import KUEUE, as_user, owner_ref


def template(gpus):
    return {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def kubeflow(kind, field, roles, labels=LABELS):
    return {
        "apiVersion": "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "train", "namespace": "nlp", "labels": dict(labels)},
        "spec": {field: {role: {"replicas": n, "template": template(g)} for role, (n, g) in roles.items()}},
    }


def lws(replicas, size, worker_gpus, leader_gpus=None, labels=LABELS):
    lwt = {"size": size, "workerTemplate": template(worker_gpus)}
    if leader_gpus is not None:
        lwt["leaderTemplate"] = template(leader_gpus)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": "nlp", "labels": dict(labels)},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
    }


MPI = ("kubeflow.org", "MPIJob")
TF = ("kubeflow.org", "TFJob")
LWS = ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")


@pytest.mark.parametrize(
    ("obj", "kind", "held"),
    [
        (kubeflow("MPIJob", "mpiReplicaSpecs", {"Launcher": (1, 0), "Worker": (6, 4)}), MPI, 24),
        (kubeflow("TFJob", "tfReplicaSpecs", {"Chief": (1, 2), "PS": (2, 0), "Worker": (5, 4)}), TF, 22),
        (lws(3, 4, 2), LWS, 24),  # 3 groups × 4 pods × 2
        (lws(2, 3, 4, leader_gpus=4), LWS, 24),  # 2 × (leader 4 + 2 workers × 4)
    ],
)
def test_devices_are_counted_as_the_pods_run_at_once(obj, kind, held):
    assert decide(policy(), request(obj, kind=kind)).allowed  # nlp may hold 24
    bigger = copy.deepcopy(obj)
    if kind == LWS:
        bigger["spec"]["replicas"] += 1
    else:
        field = next(iter(bigger["spec"]))
        bigger["spec"][field]["Worker"]["replicas"] += 1
    refused = decide(policy(), request(bigger, kind=kind))
    assert refused.reason is Reason.EXCEEDS_CEILING, refused


def test_the_mutating_webhook_completes_their_labels_and_kueues_workload_is_judged_as_theirs():
    bare = kubeflow("MPIJob", "mpiReplicaSpecs", {"Launcher": (1, 0), "Worker": (2, 2)},
                    labels={k: v for k, v in LABELS.items() if k != "allot.dev/contract"})  # fmt: skip
    mutated = decide(policy(), request(copy.deepcopy(bare), kind=MPI), mutate=True)
    job = jsonpatch.apply_patch(bare, list(mutated.patch))
    assert job["metadata"]["labels"]["allot.dev/contract"] == "std"
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert worker["metadata"]["labels"]["allot.dev/owner"] == "alice"  # its pods carry the labels too
    assert decide(policy(), request(job, kind=MPI)).allowed
    # the Workload Kueue creates for it carries none of Allot's labels: judged as the MPIJob's, devices only
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "mpijob-train-1", "namespace": "nlp",
                     "ownerReferences": [owner_ref(kind="MPIJob", api="kubeflow.org/v2beta1")]},
        "spec": {"queueName": "acme.ml.nlp", "podSets": [
            {"name": "launcher", "count": 1, "template": template(0)},
            {"name": "worker", "count": 2, "template": template(2)},
        ]},
    }  # fmt: skip
    decision = decide(policy(), as_user(request(workload, kind=("kueue.x-k8s.io", "Workload")), KUEUE))
    assert decision.allowed and decision.reason is Reason.OWNED
