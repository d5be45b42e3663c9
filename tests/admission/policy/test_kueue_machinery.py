"""Admission, second pass: Kueue's own machinery is never blocked, devices are counted the way
Kubernetes counts them, and the spec fields Kueue acts on are judged. Each test failed on the first
pass's code (issue: admission second pass)."""

import copy
from dataclasses import replace

import jsonpatch
import pytest

from admission.policy.decide import Reason, decide
from tests.admission.policy.test_decide import LABELS, job, policy, request

KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
JOB_UID = "7f5c0d4e-1b2a-4c3d-9e8f-0a1b2c3d4e5f"
GOVERNANCE = {k: v for k, v in LABELS.items() if k.startswith("allot.dev/")}


def as_user(req, username):
    return {**req, "userInfo": {"username": username, "groups": ["system:serviceaccounts"]}}


def update(old, new, kind=("batch", "Job"), user="alice"):
    return as_user({**request(new, kind=kind, operation="UPDATE"), "oldObject": old}, user)


def owner_ref(kind="Job", api="batch/v1", name="train", uid=JOB_UID):
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def kueue_workload(job_obj, **spec):
    """A Workload exactly as Kueue's job controller creates it for a batch Job: owner reference,
    job-uid label, queue and priority in the spec, one pod set from the job's template; by default
    no other label (Kueue's labelKeysToCopy is empty)."""
    template = job_obj["spec"]["template"]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-3f2a1",
            "namespace": "nlp",
            "labels": {"kueue.x-k8s.io/job-uid": JOB_UID},
            "ownerReferences": [owner_ref()],
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "queueName": "acme.ml.nlp",
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "allot-p1"},
            "priority": 10000,
            "active": True,
            "podSets": [{"name": "main", "count": job_obj["spec"]["parallelism"], "template": copy.deepcopy(template)}],
            **spec,
        },
    }


def pod_from(job_obj, name="train-abcde"):
    """A Pod as the Job controller creates it from the (mutated) template."""
    template = copy.deepcopy(job_obj["spec"]["template"])
    labels = {**(template.get("metadata") or {}).get("labels", {}), "batch.kubernetes.io/controller-uid": JOB_UID}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "nlp", "labels": labels, "ownerReferences": [owner_ref()]},
        "spec": template["spec"],
    }


def mutated(obj, kind=("batch", "Job")):
    decision = decide(policy(), request(copy.deepcopy(obj), kind=kind), mutate=True)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(obj, list(decision.patch)), decision


# --- 1. the whole chain: Job → its Pods → Kueue's Workload ------------------------------------------


def test_a_governed_job_its_pods_and_kueues_workload_are_all_admitted():
    submitted = job(gpus=2, parallelism=4, suspend=True)
    patched, _ = mutated(submitted)
    assert decide(policy(), request(patched)).allowed  # the Job itself
    # its pod template now carries the governance labels, so the pods say whose they are
    assert patched["spec"]["template"]["metadata"]["labels"] == GOVERNANCE
    # Kueue's Workload: no Allot labels, created by Kueue's service account
    workload = kueue_workload(patched)
    by_kueue = decide(policy(), as_user(request(workload, kind=("kueue.x-k8s.io", "Workload")), KUEUE))
    assert (by_kueue.allowed, by_kueue.reason) == (True, Reason.OWNED)
    # Kueue admits: unsuspends and injects the flavor's node selector into the template
    admitted = copy.deepcopy(patched)
    admitted["spec"]["suspend"] = False
    admitted["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100-80gb"}
    assert decide(policy(), update(patched, admitted, user=KUEUE)).allowed
    # the Job controller's pods
    pod = decide(policy(), as_user(request(pod_from(admitted), kind=("", "Pod")), JOB_CONTROLLER))
    assert (pod.allowed, pod.reason) == (True, Reason.OWNED)
    # Kueue preempts: suspends the job again
    preempted = copy.deepcopy(admitted)
    preempted["spec"]["suspend"] = True
    assert decide(policy(), update(admitted, preempted, user=KUEUE)).allowed


def test_the_same_objects_from_someone_else_are_judged_in_full():
    patched, _ = mutated(job())
    workload = kueue_workload(patched)
    forged = decide(policy(), as_user(request(workload, kind=("kueue.x-k8s.io", "Workload")), "mallory"))
    assert forged.reason is Reason.MISSING_LABEL  # an owner reference alone proves nothing
    pod = decide(policy(), as_user(request(pod_from(patched), kind=("", "Pod")), "mallory"))
    assert pod.reason is Reason.WRONG_QUEUE  # a bare pod must go through Kueue
    orphan = kueue_workload(patched)
    orphan["metadata"]["ownerReferences"] = []
    assert not decide(policy(), as_user(request(orphan, kind=("kueue.x-k8s.io", "Workload")), KUEUE)).allowed


def test_owned_objects_still_cannot_ask_for_more_than_the_unit_can_ever_hold():
    workload = kueue_workload(job(gpus=4, parallelism=7))  # 28 > 24
    decision = decide(policy(), as_user(request(workload, kind=("kueue.x-k8s.io", "Workload")), KUEUE))
    assert decision.reason is Reason.EXCEEDS_CEILING


# --- 2. UPDATEs are judged on what they change ----------------------------------------------------


def test_updates_that_change_nothing_allot_judges_are_never_blocked():
    stale = job(labels={**LABELS, "allot.dev/owner": "someone-who-left"})  # admitted before they left
    suspended = copy.deepcopy(stale)
    suspended["spec"]["suspend"] = True
    decision = decide(policy(), update(stale, suspended))
    assert (decision.allowed, decision.reason) == (True, Reason.UNCHANGED)
    finalizer_gone = copy.deepcopy(stale)
    finalizer_gone["metadata"]["finalizers"] = []
    finalizer_gone["metadata"]["deletionTimestamp"] = "2026-12-01T02:00:00Z"
    assert decide(policy(), update(stale, finalizer_gone)).allowed
    annotated = copy.deepcopy(stale)
    annotated["metadata"]["annotations"] = {"note": "x"}
    assert decide(policy(), update(stale, annotated)).allowed


def test_updates_that_change_what_matters_are_judged():
    ok = job()
    bigger = copy.deepcopy(ok)
    bigger["spec"]["parallelism"] = 20  # 40 GPUs > 24
    assert decide(policy(), update(ok, bigger)).reason is Reason.EXCEEDS_CEILING
    stolen = copy.deepcopy(ok)
    stolen["metadata"]["labels"]["allot.dev/owner"] = "mallory"
    assert decide(policy(), update(ok, stolen)).reason is Reason.UNKNOWN_OWNER
    escalated = copy.deepcopy(ok)
    escalated["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "allot-p0"
    assert decide(policy(), update(ok, escalated)).reason is Reason.WRONG_PRIORITY_CLASS


def test_an_object_created_without_labels_can_be_relabelled():
    bare = job(labels={})
    fixed = job()
    assert decide(policy(), update(bare, fixed)).allowed
    assert not decide(policy(), update(bare, job(labels={**LABELS, "allot.dev/owner": "mallory"}))).allowed


def test_an_update_without_its_old_object_is_malformed():
    req = request(job(), operation="UPDATE")
    decision = decide(policy(), req)
    assert decision.reason is Reason.MALFORMED and "oldObject" in decision.message


# --- 3. mutate is idempotent and only adds --------------------------------------------------------


def test_mutate_twice_changes_nothing_the_second_time_and_never_replaces():
    labels = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    first, decision = mutated(job(labels=labels, annotations={"allot.dev/checkpoint-every": "10m"}))
    assert {op["op"] for op in decision.patch} == {"add"}
    again = decide(policy(), request(copy.deepcopy(first)), mutate=True)
    assert again.allowed and again.patch == ()


def test_mutate_on_update_patches_nothing():
    labels = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    old = job(
        labels=labels, annotations={"allot.dev/checkpoint-every": "10m"}, pod={"terminationGracePeriodSeconds": 30}
    )
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    decision = decide(policy(), update(old, new), mutate=True)
    assert decision.allowed and decision.patch == ()


# --- 6, 8, 11. devices as Kubernetes counts them ----------------------------------------------------


def test_native_sidecars_add_to_the_pod_total():
    sidecar = {"name": "s", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "10"}}}
    pod = {"initContainers": [sidecar, {**sidecar, "name": "s2"}]}
    decision = decide(policy(), request(job(gpus=1, parallelism=1, pod=pod)))  # 10 + 10 + 1 = 21 ≤ 24
    assert decision.allowed
    decision = decide(policy(), request(job(gpus=5, parallelism=1, pod=pod)))  # 25 > 24
    assert decision.reason is Reason.EXCEEDS_CEILING and "25 GPUs" in decision.message
    # a plain init container after a sidecar runs beside it: 10 + 16 = 26
    pod = {"initContainers": [sidecar, {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "16"}}}]}
    assert "26 GPUs" in decide(policy(), request(job(gpus=1, parallelism=1, pod=pod))).message


def test_jobs_run_min_of_parallelism_and_completions():
    assert decide(policy(), request(job(gpus=4, parallelism=10, completions=2))).allowed  # 8, not 40
    assert not decide(policy(), request(job(gpus=4, parallelism=10, completions=7))).allowed  # 28


def ray_job(worker_group, autoscaling=False, **cluster):
    template = {"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    head = {"spec": {"containers": [{"name": "head"}]}}
    return {
        "metadata": {"name": "r", "namespace": "nlp", "labels": dict(LABELS)},
        "spec": {
            "rayClusterSpec": {
                "enableInTreeAutoscaling": autoscaling,
                "headGroupSpec": {"template": head},
                "workerGroupSpecs": [{"groupName": "gpu", "template": template, **worker_group}],
                **cluster,
            }
        },
    }


@pytest.mark.parametrize(
    ("group", "autoscaling", "gpus"),
    [
        ({"replicas": 2, "numOfHosts": 8}, False, 32),  # multi-host workers
        ({"replicas": 1, "minReplicas": 1, "maxReplicas": 20}, True, 40),  # may grow to maxReplicas
        ({"replicas": 1, "minReplicas": 13}, False, 26),  # minReplicas above replicas
    ],
)
def test_ray_worker_groups_count_at_their_largest(group, autoscaling, gpus):
    decision = decide(policy(), request(ray_job(group, autoscaling), kind=("ray.io", "RayJob")))
    assert decision.reason is Reason.EXCEEDS_CEILING and f"{gpus} GPUs" in decision.message


def test_elastic_pytorch_jobs_count_up_to_max_replicas():
    template = {"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}
    obj = {
        "metadata": {"name": "p", "namespace": "nlp", "labels": dict(LABELS)},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 8},
            "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template}},
        },
    }
    decision = decide(policy(), request(obj, kind=("kubeflow.org", "PyTorchJob")))
    assert decision.reason is Reason.EXCEEDS_CEILING and "32 GPUs" in decision.message


# --- 7, 12. Workloads are judged on the spec Kueue acts on -----------------------------------------


def user_workload(labels=None, **spec):
    obj = kueue_workload(job(gpus=1, parallelism=2))
    obj["metadata"] = {"name": "w", "namespace": "nlp", "labels": dict(GOVERNANCE if labels is None else labels)}
    obj["spec"].update(spec)
    return obj


WL = ("kueue.x-k8s.io", "Workload")


def test_a_workload_with_the_right_spec_and_no_kueue_labels_is_allowed():
    assert decide(policy(), request(user_workload(), kind=WL)).allowed
    no_tier = {k: v for k, v in GOVERNANCE.items() if k != "allot.dev/tier"}
    # issue #25.6: a user-created Workload says its tier too; the mutating webhook fills it in from its class
    refused = decide(policy(), request(user_workload(labels=no_tier), kind=WL))
    assert refused.reason is Reason.MISSING_LABEL and "allot.dev/tier" in refused.message
    mutated = decide(policy(), request(user_workload(labels=no_tier), kind=WL), mutate=True)
    assert {"op": "add", "path": "/metadata/labels/allot.dev~1tier", "value": "P1"} in mutated.patch
    patched = jsonpatch.apply_patch(user_workload(labels=no_tier), list(mutated.patch))
    assert decide(policy(), request(patched, kind=WL)).allowed


def test_a_workload_cannot_escalate_its_priority_or_change_queue_in_its_spec():
    p3 = {**GOVERNANCE, "allot.dev/tier": "P3"}
    escalated = decide(policy(), request(user_workload(labels=p3), kind=WL))  # P3 pointing at allot-p1
    assert escalated.reason is Reason.WRONG_PRIORITY_CLASS and "spec.priorityClassRef" in escalated.message
    high = decide(policy(), request(user_workload(priority=1_000_000), kind=WL))
    assert high.reason is Reason.WRONG_PRIORITY_CLASS and "spec.priority 1000000" in high.message
    queue = decide(policy(), request(user_workload(queueName="someone-else"), kind=WL))
    assert queue.reason is Reason.WRONG_QUEUE and "spec.queueName" in queue.message


def test_a_workloads_runtime_is_its_maximum_execution_time():
    p2 = {**GOVERNANCE, "allot.dev/tier": "P2"}
    ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "allot-p2"}
    missing = decide(policy(), request(user_workload(labels=p2, priorityClassRef=ref, priority=1000), kind=WL))
    assert missing.reason is Reason.RUNTIME_REQUIRED and "spec.maximumExecutionTimeSeconds" in missing.message
    ok = user_workload(labels=p2, priorityClassRef=ref, priority=1000, maximumExecutionTimeSeconds=3600)
    assert decide(policy(), request(ok, kind=WL)).allowed


def test_mutate_sets_a_workloads_spec_fields():
    bare = user_workload()
    for key in ("queueName", "priorityClassRef", "priority"):
        del bare["spec"][key]
    decision = decide(policy(), request(copy.deepcopy(bare), kind=WL), mutate=True)
    patched = jsonpatch.apply_patch(bare, list(decision.patch))
    assert patched["spec"]["queueName"] == "acme.ml.nlp"
    assert patched["spec"]["priorityClassRef"]["name"] == "allot-p1"
    assert decide(policy(), request(patched, kind=WL)).allowed


# --- 9, 10. flavors and other accelerators ----------------------------------------------------------


def test_a_pin_to_an_unknown_flavor_is_refused_with_the_flavors_there_are():
    decision = decide(policy(), request(job(pod={"nodeSelector": {"gpu": "h100"}})))
    assert decision.reason is Reason.UNKNOWN_FLAVOR
    assert "pinned to gpu=h100, which no flavor of cluster west satisfies: it would wait forever" in decision.message
    assert "a100-40gb (gpu=a100-40gb)" in decision.message
    cpu_only = job(gpus=0, pod={"nodeSelector": {"gpu": "h100"}})  # issue #25.6: it would wait forever too
    assert decide(policy(), request(cpu_only)).reason is Reason.UNKNOWN_FLAVOR


@pytest.mark.parametrize(
    ("resources", "fragment"),
    [
        ({"limits": {"amd.com/gpu": "1"}}, "amd.com/gpu"),
        ({"limits": {"nvidia.com/mig-1g.10gb": "1"}}, "nvidia.com/mig-1g.10gb"),
    ],
)
def test_accelerators_allot_does_not_count_are_refused(resources, fragment):
    pod = {"containers": [{"name": "main", "resources": resources}]}
    decision = decide(policy(), request(job(pod=pod)))
    assert decision.reason is Reason.UNGOVERNED_ACCELERATOR and fragment in decision.message
    assert "ALLOT_ADMISSION_ACCELERATORS" in decision.message


@pytest.mark.parametrize(
    "pod",
    [
        {"containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]},
        {"containers": [{"name": "main"}], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "mig"}]},
    ],
)
def test_dra_claims_are_refused_naming_what_to_request_instead(pod):
    """Issue #45.4: devices through DRA are not governed yet; the answer says so and what to ask for instead — not
    to map them with ALLOT_ADMISSION_ACCELERATORS, which cannot."""
    decision = decide(policy(), request(job(pod=pod)))
    assert decision.reason is Reason.UNGOVERNED_ACCELERATOR
    assert "asks for resource claims (DRA): Allot does not govern DRA devices on cluster west yet" in decision.message
    assert "request nvidia.com/gpu instead (a MIG slice as nvidia.com/mig-<profile>" in decision.message
    assert "ALLOT_ADMISSION_ACCELERATORS" not in decision.message


def test_a_mapped_accelerator_counts_against_its_flavor():
    mapped = replace(policy(), accelerators={"nvidia.com/gpu": None, "amd.com/gpu": "a100-40gb"})
    pod = {"containers": [{"name": "main", "resources": {"limits": {"amd.com/gpu": "4"}}}]}
    assert decide(mapped, request(job(parallelism=3, pod=pod))).allowed  # 12 ≤ 12 on a100-40gb
    decision = decide(mapped, request(job(parallelism=4, pod=pod)))
    assert decision.reason is Reason.EXCEEDS_CEILING and "16 GPUs on a100-40gb" in decision.message


# --- 13-15, 17. false denials and malformed reviews ------------------------------------------------


def test_checkpoint_cadence_is_accepted_as_a_label_too():
    labels = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    assert decide(policy(), request(job(labels={**labels, "allot.dev/checkpoint-every": "10m"})), mutate=True).allowed


def pytorch(labels, **spec):
    template = {"spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return {
        "metadata": {"name": "p", "namespace": "nlp", "labels": labels},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}, **spec},
    }


def test_a_pytorch_jobs_runtime_is_its_run_policy_deadline():
    labels = {**LABELS, "allot.dev/tier": "P2", "kueue.x-k8s.io/priority-class": "allot-p2"}
    missing = decide(policy(), request(pytorch(labels), kind=("kubeflow.org", "PyTorchJob")))
    assert "spec.runPolicy.activeDeadlineSeconds" in missing.message
    ok = pytorch(labels, runPolicy={"activeDeadlineSeconds": 3600})
    assert decide(policy(), request(ok, kind=("kubeflow.org", "PyTorchJob"))).allowed


def test_a_ray_job_on_an_existing_cluster_and_missing_fields_read_like_sentences():
    on_cluster = {"metadata": {"name": "r", "namespace": "nlp", "labels": dict(LABELS)}, "spec": {}}
    on_cluster["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    assert decide(policy(), request(on_cluster, kind=("ray.io", "RayJob"))).allowed
    broken = {"metadata": {"name": "r", "namespace": "nlp", "labels": dict(LABELS)}, "spec": {"entrypoint": "x"}}
    decision = decide(policy(), request(broken, kind=("ray.io", "RayJob")))
    assert decision.reason is Reason.MALFORMED and "spec.rayClusterSpec is missing" in decision.message
    assert "KeyError" not in decision.message
    no_template = job()
    del no_template["spec"]["template"]
    assert "spec.template is missing" in decide(policy(), request(no_template)).message


def test_a_review_without_operation_kind_or_object_is_malformed_not_allowed():
    assert decide(policy(), {"uid": "x"}).reason is Reason.MALFORMED
    assert "operation" in decide(policy(), {"uid": "x"}).message
    no_kind = decide(policy(), {"uid": "x", "operation": "CREATE"})
    assert no_kind.reason is Reason.MALFORMED and "request.kind" in no_kind.message
    no_object = decide(policy(), {"uid": "x", "operation": "CREATE", "kind": {"group": "", "kind": "Pod"}})
    assert no_object.reason is Reason.MALFORMED and "request.object" in no_object.message


def test_unsuspending_a_job_after_its_contracts_grace_period_shrank_is_not_blocked():
    """Seen through a real API server: the contract's grace period changed after the job was created;
    unsuspending it must neither be refused nor patched (its template is immutable)."""
    labels = {**LABELS, "allot.dev/tier": "P3", "kueue.x-k8s.io/priority-class": "allot-p3"}
    created = job(
        labels=labels,
        annotations={"allot.dev/checkpoint-every": "10m"},
        pod={"terminationGracePeriodSeconds": 90},  # the contract's grace was 90 s then; it is 60 s now
        suspend=True,
    )
    assert decide(policy(), request(created)).reason is Reason.GRACE_TOO_LONG  # a new job would be refused
    resumed = copy.deepcopy(created)
    resumed["spec"]["suspend"] = False
    for mutate in (False, True):
        decision = decide(policy(), update(created, resumed), mutate=mutate)
        assert decision.allowed and decision.reason is Reason.UNCHANGED and decision.patch == ()
