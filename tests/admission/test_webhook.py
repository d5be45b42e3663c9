"""The webhook endpoints, on the demo organisation: protocol, kinds, safety, auth, logs, metrics."""

import base64
import copy
import io
import json
from typing import Any

import jsonpatch
import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import Client, RequestFactory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.lines import LINES
from admission.models import AdmissionDecision
from admission.runtime import STATE
from quotas import services
from quotas.models import Cluster, OrgUnit

pytestmark = pytest.mark.django_db
TOKEN = "webhook-test-token"
LABELS = {
    "allot.dev/owner": "alice",
    "allot.dev/project": "llm-pretrain",
    "allot.dev/tier": "P1",
    "allot.dev/contract": "research-relaxed",
    "kueue.x-k8s.io/queue-name": "acme.research.nlp",
    "kueue.x-k8s.io/priority-class": "allot-p1",
}
POD = {"containers": [{"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
TEMPLATE = {"metadata": {}, "spec": POD}


@pytest.fixture(autouse=True)
def webhook(demo, settings):
    settings.ALLOT_ADMISSION_TOKEN = TOKEN
    settings.ALLOT_ADMISSION_BACKGROUND = False
    settings.ALLOT_ADMISSION_CLUSTER = "k8s-west"
    STATE.policy = None
    yield
    STATE.policy = None
    STATE.pending.clear()


def post(path, body, token=TOKEN, raw=False):
    data = body if raw else json.dumps(body)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client().post(f"/admission/k8s/{path}", data=data, content_type="application/json", headers=headers)


def review(
    obj, group, kind, namespace="nlp", uid="11111111-2222-3333-4444-555555555555", operation="CREATE", dry_run=False
):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "namespace": namespace,
            "operation": operation,
            "object": obj,
            "dryRun": dry_run,
            "userInfo": {"username": "alice"},
        },
    }


def workload(kind, labels=None):
    labels_or_default = dict(LABELS if labels is None else labels)
    meta = {"name": "w", "namespace": "nlp", "labels": labels_or_default}
    specs: dict[str, dict[str, Any]] = {
        "Pod": POD,
        "Job": {"parallelism": 2, "template": TEMPLATE},
        "JobSet": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": TEMPLATE}}}
            ]
        },
        "PyTorchJob": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": TEMPLATE},
                "Worker": {"replicas": 3, "template": TEMPLATE},
            }
        },
        "RayJob": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": TEMPLATE},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": TEMPLATE}],
            }
        },
        "RayCluster": {
            "headGroupSpec": {"template": TEMPLATE},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": TEMPLATE}],
        },
        "Workload": {"podSets": [{"name": "main", "count": 4, "template": TEMPLATE}]},
    }
    spec = specs[kind]
    if kind == "Workload":  # Kueue reads a Workload's queue and priority class from its spec
        queue, cls = (
            labels_or_default.get("kueue.x-k8s.io/queue-name"),
            labels_or_default.get("kueue.x-k8s.io/priority-class"),
        )
        spec = {**spec, **({"queueName": queue} if queue else {})}
        if cls:
            spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": cls}
    return {"metadata": meta, "spec": copy.deepcopy(spec)}


KINDS = [
    ("", "Pod"),
    ("batch", "Job"),
    ("jobset.x-k8s.io", "JobSet"),
    ("kubeflow.org", "PyTorchJob"),
    ("ray.io", "RayJob"),
    ("ray.io", "RayCluster"),
    ("kueue.x-k8s.io", "Workload"),
]


def answer(response):
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    return body["response"]


@pytest.mark.parametrize(("group", "kind"), KINDS)
def test_every_kind_is_allowed_when_compliant_and_refused_when_too_large(group, kind):
    ok = answer(post("validate", review(workload(kind), group, kind)))
    assert ok["allowed"] is True and ok["uid"] == "11111111-2222-3333-4444-555555555555"
    big = workload(kind)
    text = json.dumps(big).replace('"nvidia.com/gpu": "2"', '"nvidia.com/gpu": "200"')
    refused = answer(post("validate", review(json.loads(text), group, kind)))
    assert refused["allowed"] is False and refused["status"]["code"] == 403
    assert (
        "[exceeds_ceiling]" in refused["status"]["message"]
        and "can never hold more than" in refused["status"]["message"]
    )


@pytest.mark.parametrize(("group", "kind"), KINDS)
def test_mutate_then_validate_allows_what_mutate_fixed(group, kind):
    bare = workload(kind, labels={"allot.dev/owner": "alice", "allot.dev/project": "nlp", "allot.dev/tier": "P2"})
    assert answer(post("validate", review(copy.deepcopy(bare), group, kind)))["allowed"] is False
    mutated = answer(post("mutate", review(copy.deepcopy(bare), group, kind)))
    assert mutated["allowed"] and mutated["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(bare, json.loads(base64.b64decode(mutated["patch"])))
    if kind == "Workload":
        assert patched["spec"]["maximumExecutionTimeSeconds"] == 14400
    else:
        assert patched["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == "14400"
    assert answer(post("validate", review(patched, group, kind)))["allowed"] is True


@pytest.mark.parametrize(
    "name", ["admissionreview-request-pod-create.json", "admissionreview-request-batchv1-job-create.json"]
)
def test_captured_requests_from_a_real_api_server(fixtures, name):
    import copy

    captured = json.loads((fixtures / "admission-samples" / name).read_text())
    uid = captured["request"]["uid"]
    # asking for no GPU in a namespace no team holds: not Allot's to block (issue #40.1)
    assert answer(post("validate", captured))["allowed"] is True
    gpu = copy.deepcopy(captured)
    obj = gpu["request"]["object"]
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    refused = answer(post("validate", gpu))
    assert refused["uid"] == uid and refused["allowed"] is False
    assert "[namespace_unbound]" in refused["status"]["message"] and "gov-lab" in refused["status"]["message"]
    services.namespace_bind(
        actor=None,
        reason="t",
        unit=OrgUnit.objects.get(path="acme/research/nlp"),
        cluster=Cluster.objects.get(name="k8s-west"),
        namespace="gov-lab",
    )
    STATE.policy = None
    missing = answer(post("validate", captured))
    assert "[missing_label]" in missing["status"]["message"] and "allot.dev/owner" in missing["status"]["message"]
    captured["request"]["object"]["metadata"]["labels"] = dict(LABELS)
    assert answer(post("validate", captured))["allowed"] is True


def test_dry_run_leaves_no_trace_and_real_calls_are_logged():
    post("validate", review(workload("Pod"), "", "Pod", dry_run=True))
    STATE.flush()
    assert AdmissionDecision.objects.count() == 0
    bad = workload("Pod", labels={**LABELS, "allot.dev/tier": "P9"})
    post("validate", review(bad, "", "Pod", uid="uid-2"))
    STATE.flush()
    row = AdmissionDecision.objects.get()
    assert (row.uid, row.allowed, row.reason, row.unit_path, row.owner) == (
        "uid-2",
        False,
        "tier_not_allowed",
        "acme/research/nlp",
        "alice",
    )


def test_a_decision_is_recorded_once_when_its_answer_is_closed_not_before():
    """Issue #40.6: the bookkeeping runs in close(), after the WSGI server sent the answer — once, however
    many times a server closes it — and the row keeps every field through the batched insert."""
    from admission.views import validate as view

    request = RequestFactory().post(
        "/admission/k8s/validate",
        json.dumps(review(workload("Job"), "batch", "Job", uid="uid-close")),
        content_type="application/json",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    response = view(request)
    assert response["Content-Length"] == str(len(response.content))  # no chunked encoding
    STATE.flush()
    assert not AdmissionDecision.objects.filter(uid="uid-close").exists()  # the answer has not gone yet
    request_finished.disconnect(close_old_connections)  # as Django's test client does: keep the test's transaction
    try:
        response.close()
        response.close()
    finally:
        request_finished.connect(close_old_connections)
    STATE.flush()
    row = AdmissionDecision.objects.get(uid="uid-close")
    assert (row.kind, row.operation, row.allowed, row.reason, row.namespace, row.cluster) == (
        "Job", "CREATE", True, "allowed", "nlp", "k8s-west"
    )  # fmt: skip
    assert row.at is not None and row.latency_ms > 0


def test_the_log_names_a_controllers_pods_by_their_generate_name():
    """Issue #25.9: a Job controller's pods arrive with generateName only (the name is set after admission)."""
    pod = workload("Pod")
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "train-7x2kq-"
    post("validate", review(pod, "", "Pod", uid="uid-gen"))
    STATE.flush()
    assert AdmissionDecision.objects.get(uid="uid-gen").name == "train-7x2kq-*"


def test_the_decision_log_in_the_api_answers_why_was_my_job_refused(client):
    post("validate", review(workload("Job", labels={**LABELS, "allot.dev/owner": "mallory"}), "batch", "Job"))
    STATE.flush()
    client.force_login(OrgUnit.objects.get(path="acme/research/nlp").leads.get())
    found = client.get("/api/v1/admission-decisions/", {"within": "acme/research", "allowed": "false"}).json()
    assert found["count"] == 1 and found["results"][0]["reason"] == "unknown_owner"
    assert "mallory" in found["results"][0]["message"]


def test_the_decision_log_follows_the_usage_read_rule(client, settings):
    """Issue #40.5: under ALLOT_SHOWBACK_VISIBILITY=leads, a lead reads its units' decisions (not another team's),
    anyone their own, and decisions in namespaces no team holds are the platform admins'."""
    from django.contrib.auth.models import User

    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    post("validate", review(workload("Job", labels={**LABELS, "allot.dev/owner": "mallory"}), "batch", "Job"))
    vision = workload("Job", labels={**LABELS, "allot.dev/owner": "viewer"})
    post("validate", review(vision, "batch", "Job", namespace="vision"))
    gpu_pod = workload("Pod")
    post("validate", review(gpu_pod, "", "Pod", namespace="scratch"))  # no team holds it
    STATE.flush()

    def seen(user):
        client.force_login(user)
        return sorted(r["namespace"] for r in client.get("/api/v1/admission-decisions/").json()["results"])

    assert seen(OrgUnit.objects.get(path="acme/research/nlp").leads.get()) == ["nlp"]
    assert seen(User.objects.get(username="viewer")) == ["vision"]  # its own job only
    assert seen(User.objects.get(username="admin")) == ["nlp", "scratch", "vision"]


def test_the_log_is_bounded(settings):
    settings.ALLOT_ADMISSION_LOG_KEEP = 5
    for i in range(12):
        post("validate", review(workload("Pod"), "", "Pod", uid=f"u{i}"))
    STATE.flush()
    assert list(AdmissionDecision.objects.values_list("uid", flat=True)) == [f"u{i}" for i in range(11, 6, -1)]


@pytest.mark.parametrize(
    ("lines", "logged"), [("denied", ["u-denied"]), ("all", ["u-allowed", "u-denied"]), ("none", [])]
)
def test_log_lines_are_written_for_the_decisions_the_setting_names_and_every_decision_is_kept(
    settings, monkeypatch, lines, logged
):
    """Issue #40.6: a JSON line per decision cost a fifth of the webhook's throughput under load (the handler's
    lock, formatting and a write per answer); by default only refusals are logged, as Gatekeeper logs denies,
    and the lines wait for the flush that writes the decision log (admission.lines)."""
    settings.ALLOT_ADMISSION_LOG_LINES = lines
    stream = io.StringIO()
    monkeypatch.setattr(LINES, "stream", stream)
    bad = workload("Pod", labels={**LABELS, "allot.dev/tier": "P9"})
    assert answer(post("validate", review(workload("Pod"), "", "Pod", uid="u-allowed")))["allowed"] is True
    assert answer(post("validate", review(bad, "", "Pod", uid="u-denied")))["allowed"] is False
    assert stream.getvalue() == ""  # not on the request
    STATE.flush()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["uid"] for e in events] == logged
    assert all(e["event"] == "admission" and e["allowed"] is (e["uid"] == "u-allowed") for e in events)
    assert all(e["reason"] == ("allowed" if e["allowed"] else "tier_not_allowed") for e in events)
    assert sorted(AdmissionDecision.objects.values_list("uid", flat=True)) == ["u-allowed", "u-denied"]


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("wrong", 401)])
def test_unauthenticated_calls_are_refused(token, status):
    response = post("validate", review(workload("Pod"), "", "Pod"), token=token)
    assert response.status_code == status and "bearer token" in response.json()["detail"]


def test_client_certificate_mode(settings):
    settings.ALLOT_ADMISSION_AUTH = "client-cert"
    body = json.dumps(review(workload("Pod"), "", "Pod"))
    assert Client().post("/admission/k8s/validate", body, content_type="application/json").status_code == 401
    ok = Client().post("/admission/k8s/validate", body, content_type="application/json", HTTP_X_CLIENT_VERIFY="SUCCESS")
    assert ok.status_code == 200


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe\x00", "UTF-8"),
        (b"[]", "apiVersion"),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}
            ).encode(),
            "apiVersion",
        ),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}).encode(), "uid"),
    ],
)
def test_malformed_bodies_get_a_400_that_names_the_problem(body, fragment):
    response = post("validate", body, raw=True)
    assert response.status_code == 400 and fragment in response.json()["detail"]


def test_the_documented_body_limit_is_the_one_enforced():
    """3 MiB, not Django's 2.5 MiB: a 2.8 MiB review is judged like any other."""
    big = workload("Pod")
    big["metadata"]["annotations"] = {"blob": "y" * (2800 * 1024)}
    body = review(big, "", "Pod")
    assert 2.5 * 2**20 < len(json.dumps(body)) < 3 * 2**20
    assert answer(post("validate", body))["allowed"] is True


def test_an_object_over_the_limit_is_denied_as_too_large(settings):
    settings.ALLOT_ADMISSION_MAX_BODY_BYTES = 1000
    refused = answer(post("validate", review(workload("Pod", labels={**LABELS, "x": "y" * 2000}), "", "Pod")))
    assert refused["allowed"] is False and refused["uid"] == "11111111-2222-3333-4444-555555555555"
    assert "[too_large]" in refused["status"]["message"] and "the limit is 1000 bytes" in refused["status"]["message"]
    no_uid = post("validate", b'{"x": "' + b"y" * 2000 + b'"}', raw=True)
    assert no_uid.status_code == 413 and "too large" in no_uid.json()["detail"]


def test_deeply_nested_json_is_a_json_400():
    response = post("validate", b"[" * 10_000 + b"]" * 10_000, raw=True)
    assert response.status_code == 400 and "nests" in response.json()["detail"]


def test_a_review_with_no_operation_kind_or_object_is_denied_as_malformed():
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x"}}
    refused = answer(post("validate", body))
    assert refused["allowed"] is False and "[malformed]" in refused["status"]["message"]
    assert "request.operation" in refused["status"]["message"]


def test_readiness_is_false_while_any_worker_of_the_pod_cannot_decide(settings, tmp_path):
    """Issue #40.2: a probe reaches one worker; the pod is ready only if every live worker published a policy.
    Another worker is a real process here (its state file names its pid); a dead worker's file is ignored."""
    import subprocess
    import sys

    from admission import workers

    settings.ALLOT_ADMISSION_STATE_DIR = str(tmp_path)
    assert Client().get("/admission/readyz").status_code == 200  # this worker loaded and published its own
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        workers.publish(None, "OperationalError: the database did not answer", pid=other.pid)
        ready = Client().get("/admission/readyz")
        assert ready.status_code == 503 and f"worker {other.pid}: OperationalError" in ready.json()["why"]
        assert STATE.policy is not None
        workers.publish(STATE.policy.revision, pid=other.pid)  # it loaded the policy
        assert Client().get("/admission/readyz").status_code == 200
        workers.publish(None, "still loading", pid=other.pid)
    finally:
        other.kill()
        other.wait()
    assert Client().get("/admission/readyz").status_code == 200  # gone (gunicorn's child_exit also forgets it)


def test_without_a_policy_only_exempt_namespaces_and_deletions_pass_and_readiness_says_why(settings):
    from admission import runtime

    settings.ALLOT_ADMISSION_CLUSTER = "no-such-cluster"  # as when the database cannot be read
    STATE.policy, STATE.failed_at = None, 0.0
    refused = answer(post("validate", review(workload("Pod"), "", "Pod")))
    assert refused["allowed"] is False and "[policy_unavailable]" in refused["status"]["message"]
    assert "malformed" not in refused["status"]["message"]
    system = answer(post("validate", review(workload("Pod"), "", "Pod", namespace="kube-system")))
    assert system["allowed"] is True
    assert answer(post("validate", review(None, "", "Pod", operation="DELETE")))["allowed"] is True
    ready = Client().get("/admission/readyz")
    assert ready.status_code == 503 and "no-such-cluster" in ready.json()["why"]
    assert Client().get("/admission/healthz").status_code == 200  # alive, just not ready
    settings.ALLOT_ADMISSION_CLUSTER = "k8s-west"  # the database answers again
    runtime.STATE.failed_at = 0.0
    assert Client().get("/admission/readyz").json()["ready"] is True
    assert answer(post("validate", review(workload("Pod"), "", "Pod")))["allowed"] is True


def test_metrics_and_noop():
    post("validate", review(workload("Pod"), "", "Pod"))
    text = Client().get("/admission/metrics").content.decode()
    assert 'allot_admission_decisions_total{allowed="true",kind="Pod",reason="allowed",webhook="validate"}' in text
    assert "allot_admission_duration_seconds_bucket" in text
    noop = answer(post("noop", review(workload("Pod"), "", "Pod", uid="n1")))
    assert noop == {"uid": "n1", "allowed": True}


def test_policy_changes_reach_the_webhook_on_refresh():
    answer(post("validate", review(workload("Pod"), "", "Pod")))
    assert STATE.refresh(force=False) is False  # nothing changed
    services.org_unit_update(
        actor=None, reason="t", unit=OrgUnit.objects.get(path="acme/research/nlp"), allowed_tiers=[]
    )
    from quotas.models import WorkloadTier

    services.org_unit_update(
        actor=None,
        reason="P0 only",
        unit=OrgUnit.objects.get(path="acme/research/nlp"),
        allowed_tiers=[WorkloadTier.objects.get(name="P0")],
    )
    assert STATE.refresh(force=False) is True
    refused = answer(post("validate", review(workload("Pod"), "", "Pod")))
    assert "[tier_not_allowed]" in refused["status"]["message"]


# --- fuzzing: thousands of generated and mutated reviews ----------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)


@st.composite
def mutated_reviews(draw):
    group, kind = draw(st.sampled_from([*KINDS, ("apps", "Deployment")]))
    body = review(
        workload(kind if kind != "Deployment" else "Pod"),
        group,
        kind,
        namespace=draw(st.sampled_from(["nlp", "vision", "kube-system", "gov-lab", ""])),
        operation=draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH", None])),
    )
    req = body["request"]
    req["userInfo"] = {"username": draw(st.sampled_from(["alice", KUEUE_SA, JOB_CONTROLLER_SA, "mallory"]))}
    if draw(st.booleans()):
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": draw(st.booleans())}
        req["object"]["metadata"]["ownerReferences"] = [ref]
    if req["operation"] == "UPDATE" and draw(st.integers(0, 4)):
        req["oldObject"] = copy.deepcopy(req["object"])
        if draw(st.booleans()):
            req["oldObject"]["metadata"]["labels"] = {}
    if draw(st.integers(0, 3)) == 0:  # the second pass's counting cases: sidecars, Ray hosts, pins, accelerators
        extra = draw(
            st.sampled_from(
                [
                    ("initContainers", [{"name": "s", "restartPolicy": "Always", "resources": {"limits": GPUS_70}}]),
                    ("nodeSelector", {"gpu.nvidia.com/class": draw(st.sampled_from(["A100-80GB", "nope"]))}),
                    ("resourceClaims", [{"name": "gpu"}]),
                    ("containers", [{"name": "m", "resources": {"limits": {"amd.com/gpu": "1"}}}]),
                ]
            )
        )
        for spec in _pod_specs(req["object"]):
            spec[extra[0]] = copy.deepcopy(extra[1])
    for _ in range(draw(st.integers(0, 4))):
        path = draw(
            st.sampled_from(
                [
                    (),
                    ("request",),
                    ("request", "object"),
                    ("request", "object", "metadata"),
                    ("request", "object", "metadata", "labels"),
                    ("request", "object", "spec"),
                ]
            )
        )
        node = body
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        key = draw(st.sampled_from([*list(node.keys()), "uid", "kind", "allot.dev/tier", "extra"]))
        if draw(st.booleans()) and key in node:
            del node[key]
        else:
            node[key] = draw(json_values)
    return body


KUEUE_SA = "system:serviceaccount:kueue-system:kueue-controller-manager"
JOB_CONTROLLER_SA = "system:serviceaccount:kube-system:job-controller"
GPUS_70 = {"nvidia.com/gpu": "70"}


def _pod_specs(obj):
    """Every pod spec of the fixture shapes made by ``workload``."""
    found, pending = [], [obj]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                found.append(node)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found


def _asks_accelerators(obj):
    """An independent reading: any container of any pod spec asking for a non-zero accelerator resource."""
    for spec in _pod_specs(obj):
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            resources = container.get("resources") if isinstance(container, dict) else None
            for part in ("requests", "limits"):
                values = resources.get(part) if isinstance(resources, dict) else None
                for name, value in (values or {}).items() if isinstance(values, dict) else ():
                    if str(name).startswith(("nvidia.com/", "amd.com/", "gpu.intel.com/")) and not _zero(value):
                        return True
    return False


def _zero(value):
    try:
        return float(str(value).removesuffix("m")) == 0
    except ValueError:
        return False


def _labels_ok(obj, kind):
    """An independent reading of the README's label rules for the fixture's team (nlp)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(labels, dict):
        return False
    wanted = {k: v for k, v in LABELS.items() if k != "allot.dev/project"}
    if kind == "Workload":  # Kueue acts on the spec; the tier may come from the priority class
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        ref = spec.get("priorityClassRef")
        if spec.get("queueName") != LABELS["kueue.x-k8s.io/queue-name"] or not isinstance(ref, dict):
            return False
        if ref.get("name") != "allot-p1" or labels.get("allot.dev/tier", "P1") != "P1":
            return False
        wanted = {k: v for k, v in wanted.items() if k.startswith("allot.dev/") and k != "allot.dev/tier"}
    return all(labels.get(k) == v for k, v in wanted.items())


def _judged_kind(ref):
    group = str(ref.get("apiVersion") or "").rpartition("/")[0]
    return (group, ref.get("kind")) in {
        ("", "Pod"), ("batch", "Job"), ("jobset.x-k8s.io", "JobSet"), ("kubeflow.org", "PyTorchJob"),
        ("ray.io", "RayJob"), ("ray.io", "RayCluster"), ("kueue.x-k8s.io", "Workload"),
    }  # fmt: skip


def compliant(body):
    """An independent oracle: what the webhook may allow."""
    req = body.get("request")
    if not isinstance(req, dict) or req.get("operation") not in ("CREATE", "UPDATE"):
        return True  # DELETE/CONNECT are not Allot's business
    if req.get("namespace") == "kube-system":
        return True  # exempt
    if req.get("namespace") not in ("nlp", "vision"):
        # a namespace no team holds: its UPDATEs are not Allot's to block (finalizers, status, labels), and a
        # CREATE only when it asks for an accelerator (issue #40.1: the cluster's own pods are never blocked)
        return req.get("operation") == "UPDATE" or not _asks_accelerators(req.get("object"))
    home = req.get("namespace") == "nlp"  # the fixture's labels are right for nlp only
    obj = req.get("object")
    kind = req["kind"].get("kind") if isinstance(req.get("kind"), dict) else None
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    user = req.get("userInfo")
    by_controller = isinstance(user, dict) and user.get("username") in (KUEUE_SA, JOB_CONTROLLER_SA)
    if (
        by_controller
        and isinstance(refs, list)
        and any(isinstance(r, dict) and r.get("controller") is True and _judged_kind(r) for r in refs)
    ):
        return True  # judged as part of its owner (a kind Allot judges): only its devices are checked
    if home and _labels_ok(obj, kind):
        return True
    # an UPDATE may keep violations its old object already had
    return req.get("operation") == "UPDATE" and not (home and _labels_ok(req.get("oldObject"), kind))


@settings(max_examples=2500, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=mutated_reviews())
def test_fuzz_mutated_reviews_are_never_a_500_nor_an_accidental_allow(body):
    for path in ("validate", "mutate"):
        response = post(path, copy.deepcopy(body))
        assert response.status_code in (200, 400), response.content
        if response.status_code == 200:
            result = response.json()["response"]
            assert result["uid"] == body["request"]["uid"]
            if path == "validate" and result["allowed"]:
                assert compliant(body), result


@settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=json_values)
def test_fuzz_arbitrary_json_is_a_400_or_a_well_formed_denial(body):
    response = post("validate", body)
    assert response.status_code in (200, 400)
    if response.status_code == 200:
        assert response.json()["response"]["allowed"] is False


def test_the_webhook_deployment_serves_only_the_webhooks(settings):
    settings.ROOT_URLCONF = "config.urls_admission"
    settings.MIDDLEWARE = []
    assert answer(post("validate", review(workload("Pod"), "", "Pod")))["allowed"] is True
    missing = Client().get("/api/v1/units/")
    assert missing.status_code == 404 and "/admission/k8s/validate" in missing.json()["detail"]
    assert Client().get("/admission/healthz").json()["ok"] is True
