"""The webhook endpoints, on the demo organisation: protocol, kinds, safety, auth, logs, metrics."""

import base64
import copy
import json

import jsonpatch
import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    meta = {"name": "w", "namespace": "nlp", "labels": dict(LABELS if labels is None else labels)}
    spec = {
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
        "Workload": {"podSets": [{"name": "main", "count": 4, "template": TEMPLATE}]},
    }[kind]
    return {"metadata": meta, "spec": copy.deepcopy(spec)}


KINDS = [
    ("", "Pod"),
    ("batch", "Job"),
    ("jobset.x-k8s.io", "JobSet"),
    ("kubeflow.org", "PyTorchJob"),
    ("ray.io", "RayJob"),
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
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == "14400"
    assert answer(post("validate", review(patched, group, kind)))["allowed"] is True


@pytest.mark.parametrize(
    "name", ["admissionreview-request-pod-create.json", "admissionreview-request-batchv1-job-create.json"]
)
def test_captured_requests_from_a_real_api_server(shared_reference, name):
    captured = json.loads((shared_reference / "admission-samples" / name).read_text())
    uid = captured["request"]["uid"]
    refused = answer(post("validate", captured))
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


def test_the_decision_log_in_the_api_answers_why_was_my_job_refused(client):
    post("validate", review(workload("Job", labels={**LABELS, "allot.dev/owner": "mallory"}), "batch", "Job"))
    STATE.flush()
    client.force_login(OrgUnit.objects.get(path="acme/research/nlp").leads.get())
    found = client.get("/api/v1/admission-decisions/", {"within": "acme/research", "allowed": "false"}).json()
    assert found["count"] == 1 and found["results"][0]["reason"] == "unknown_owner"
    assert "mallory" in found["results"][0]["message"]


def test_the_log_is_bounded(settings):
    settings.ALLOT_ADMISSION_LOG_KEEP = 5
    for i in range(12):
        post("validate", review(workload("Pod"), "", "Pod", uid=f"u{i}"))
    STATE.flush()
    assert list(AdmissionDecision.objects.values_list("uid", flat=True)) == [f"u{i}" for i in range(11, 6, -1)]


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


def test_oversized_bodies(settings):
    settings.ALLOT_ADMISSION_MAX_BODY_BYTES = 1000
    response = post("validate", review(workload("Pod", labels={**LABELS, "x": "y" * 2000}), "", "Pod"))
    assert response.status_code == 400 and "larger than 1000" in response.json()["detail"]


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


def compliant(body):
    """An independent oracle: what the webhook may allow."""
    req = body.get("request")
    if not isinstance(req, dict) or req.get("operation") not in ("CREATE", "UPDATE"):
        return True  # DELETE/CONNECT are not Allot's business
    if req.get("namespace") == "kube-system":
        return True  # exempt
    obj = req.get("object")
    labels = (
        obj.get("metadata", {}).get("labels")
        if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict)
        else None
    )
    return (
        req.get("namespace") == "nlp"
        and isinstance(labels, dict)
        and all(labels.get(k) == v for k, v in LABELS.items() if k != "allot.dev/project")
    )


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
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
