"""Issue #40.4: KubeRay's chain RayJob → RayCluster → Pods is judged once, at the RayJob, like Job → Pods.

KubeRay's operator creates a RayCluster owned by the RayJob (controller ownerReference) and then the head
and worker Pods owned by the RayCluster. Before, RayCluster was not a kind Allot judged, so its Pods were
judged in full — and every opportunistic one was refused (the checkpoint cadence is the RayJob's label, not
copied into the RayCluster's templates), while a RayCluster a person wrote was never judged at all."""

from __future__ import annotations

import copy

import jsonpatch

from admission.policy.decide import Reason, decide
from tests.admission.policy.test_decide import LABELS, policy, request
from tests.admission.policy.test_kueue_machinery import as_user, owner_ref

KUBERAY = "system:serviceaccount:ray-system:kuberay-operator"
RAYJOB_UID = "0b7e3f7a-5a1c-4c41-8d7f-3f2b9a7c1d20"
CLUSTER_UID = "6a0f9f1e-2f4b-4e0a-9c33-5d1d2c7e8b41"
P3 = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}


def cluster_spec(gpus=2, replicas=2):
    worker = {"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas, "template": worker}],
    }


def ray_job(labels=P3, annotations=None, **spec):
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "tune", "namespace": "nlp", "uid": RAYJOB_UID, "labels": dict(labels),
                     "annotations": dict(annotations or {"allot.dev/checkpoint-every": "15m"})},
        "spec": {"entrypoint": "python tune.py", "activeDeadlineSeconds": 3600,
                 "rayClusterSpec": cluster_spec(**spec)},
    }  # fmt: skip


def ray_cluster_of(rayjob, name="tune-raycluster-x7k2q"):
    """The RayCluster KubeRay creates for a RayJob: its rayClusterSpec, KubeRay's own labels, no Allot ones."""
    labels = {"ray.io/originated-from-cr-name": rayjob["metadata"]["name"], "ray.io/originated-from-crd": "RayJob"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "nlp", "uid": CLUSTER_UID, "labels": labels,
                     "ownerReferences": [owner_ref(kind="RayJob", api="ray.io/v1", name="tune", uid=RAYJOB_UID)]},
        "spec": copy.deepcopy(rayjob["spec"]["rayClusterSpec"]),
    }  # fmt: skip


def worker_pod(cluster, gpus=None):
    """A worker Pod as KubeRay creates it: the group's template, the API server's default grace of 30 s."""
    template = copy.deepcopy(cluster["spec"]["workerGroupSpecs"][0]["template"])
    spec = {**template["spec"], "terminationGracePeriodSeconds": 30}
    if gpus is not None:
        spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    labels = {**(template.get("metadata") or {}).get("labels", {}), "ray.io/cluster": cluster["metadata"]["name"],
              "ray.io/node-type": "worker", "ray.io/group": "gpu"}  # fmt: skip
    ref = owner_ref(kind="RayCluster", api="ray.io/v1", name=cluster["metadata"]["name"], uid=CLUSTER_UID)
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"generateName": "tune-worker-", "namespace": "nlp", "labels": labels,
                         "ownerReferences": [ref]}}  # fmt: skip


def judge(obj, kind, user="alice", mutate=False):
    return decide(policy(), as_user(request(obj, kind=kind), user), mutate=mutate)


RAYJOB, RAYCLUSTER, POD = ("ray.io", "RayJob"), ("ray.io", "RayCluster"), ("", "Pod")


def test_an_opportunistic_ray_jobs_cluster_and_pods_are_admitted_as_the_jobs():
    submitted = ray_job()
    decision = judge(copy.deepcopy(submitted), RAYJOB, mutate=True)
    assert decision.allowed, decision.message
    rayjob = jsonpatch.apply_patch(submitted, list(decision.patch))
    assert judge(rayjob, RAYJOB).allowed  # judged in full, once
    cluster = ray_cluster_of(rayjob)
    by_operator = judge(cluster, RAYCLUSTER, user=KUBERAY)
    assert (by_operator.allowed, by_operator.reason) == (True, Reason.OWNED)
    # its worker pods: no checkpoint label, the API server's default grace — the RayJob's, not refused
    pod = judge(worker_pod(cluster), POD, user=KUBERAY)
    assert (pod.allowed, pod.reason) == (True, Reason.OWNED), pod.message


def test_what_the_operator_creates_still_cannot_ask_for_more_than_the_unit_can_ever_hold():
    cluster = ray_cluster_of(ray_job(labels=LABELS))
    grown = copy.deepcopy(cluster)
    grown["spec"]["workerGroupSpecs"][0]["replicas"] = 200
    assert judge(grown, RAYCLUSTER, user=KUBERAY).reason is Reason.EXCEEDS_CEILING
    assert judge(worker_pod(cluster, gpus=200), POD, user=KUBERAY).reason is Reason.EXCEEDS_CEILING


def test_a_ray_cluster_a_person_writes_is_judged_in_full_and_so_are_its_pods():
    cluster = ray_cluster_of(ray_job())
    del cluster["metadata"]["ownerReferences"]  # standalone: nothing Allot judged owns it
    unlabelled = judge(cluster, RAYCLUSTER)
    assert (unlabelled.reason, unlabelled.kind) == (Reason.MISSING_LABEL, "RayCluster")
    labelled = copy.deepcopy(cluster)
    labelled["metadata"]["labels"] = dict(LABELS)
    assert judge(labelled, RAYCLUSTER).allowed
    labelled["spec"]["workerGroupSpecs"][0]["replicas"] = 200
    too_big = judge(labelled, RAYCLUSTER)
    assert too_big.reason is Reason.EXCEEDS_CEILING and "400 GPUs" in too_big.message
    # the same RayCluster claimed to be a RayJob's, but written by a person: judged in full all the same
    claimed = ray_cluster_of(ray_job())
    assert judge(claimed, RAYCLUSTER).reason is Reason.MISSING_LABEL


def test_pods_of_a_ray_cluster_made_by_someone_else_are_judged_in_full():
    pod = worker_pod(ray_cluster_of(ray_job()))
    assert judge(pod, POD).reason is Reason.MISSING_LABEL  # a person, not the operator
