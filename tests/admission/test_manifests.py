"""The webhook manifests in deploy/ say what the docs promise."""

from pathlib import Path

import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "base" / "webhook.yaml"


def load():
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFESTS.read_text())}


def test_failure_policies_timeouts_and_exemptions():
    docs = load()
    validate = docs["ValidatingWebhookConfiguration"]["webhooks"][0]
    mutate = docs["MutatingWebhookConfiguration"]["webhooks"][0]
    assert (validate["failurePolicy"], mutate["failurePolicy"]) == ("Fail", "Ignore")
    for hook in (validate, mutate):
        assert (
            hook["sideEffects"] == "None" and hook["timeoutSeconds"] <= 5 and hook["admissionReviewVersions"] == ["v1"]
        )
        # opt-in: only namespaces the sync labels (bound to a team) are sent; the cluster's own never are
        assert hook["namespaceSelector"] == {"matchLabels": {"allot.dev/governed": "true"}}
        resources = {name for r in hook["rules"] for name in r["resources"]}
        assert resources == {
            "pods", "jobs", "jobsets", "pytorchjobs", "mpijobs", "tfjobs", "leaderworkersets", "rayjobs", "rayclusters",
            "workloads",
        }  # fmt: skip
    assert validate["clientConfig"]["service"]["path"] == "/admission/k8s/validate"
    assert mutate["clientConfig"]["service"]["path"] == "/admission/k8s/mutate"
    assert validate["namespaceSelector"] == mutate["namespaceSelector"] and validate["rules"] == mutate["rules"]


def test_the_webhook_runs_highly_available_with_tls():
    docs = load()
    assert docs["Deployment"]["spec"]["replicas"] >= 3 and docs["PodDisruptionBudget"]["spec"]["minAvailable"] >= 2
    containers = {c["name"]: c for c in docs["Deployment"]["spec"]["template"]["spec"]["containers"]}
    env = {e["name"]: e.get("value") for e in containers["webhook"]["env"]}
    assert containers["webhook"]["args"] == ["webhook"]  # the entrypoint's role: ALLOT_WEBHOOK_ONLY=true
    # behind the front, with keep-alive on the front's upstream connections (a sync worker closes each one)
    assert env["GUNICORN_BIND"].startswith("127.0.0.1:") and env["GUNICORN_WORKER_CLASS"] == "gthread"
    front = {e["name"]: e.get("value") for e in containers["front"]["env"]}
    assert front["ALLOT_NGINX_LISTEN"] == "8443 ssl" and front["ALLOT_NGINX_UPSTREAM"] == env["GUNICORN_BIND"]
    assert "allot-webhook.allot-system.svc" in docs["Certificate"]["spec"]["dnsNames"]
    container = containers["webhook"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/admission/readyz"  # ready = policy loaded
    assert container["livenessProbe"]["httpGet"]["path"] == "/admission/healthz"


def test_gunicorn_reuses_connections_and_isolates_slow_clients():
    import runpy

    conf = runpy.run_path(str(MANIFESTS.parents[2] / "gunicorn.conf.py"))
    assert conf["worker_class"] == "gthread" and conf["threads"] >= 4 and conf["keepalive"] >= 60
    front = (MANIFESTS.parent / "nginx-webhook.conf.template").read_text()
    upstream = front[
        front.index("upstream allot_webhook {") : front.index("\n}", front.index("upstream allot_webhook"))
    ]
    assert "keepalive " in upstream  # nginx keeps its connections to gunicorn: not one per call
