"""The webhook manifests in deploy/ say what the docs promise."""

from pathlib import Path

import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "admission-webhooks.yaml"


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
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["operator"] == "NotIn" and {"kube-system", "allot-system"} <= set(excluded["values"])
        resources = {r["resources"][0] for r in hook["rules"]}
        assert resources == {"pods", "jobs", "jobsets", "pytorchjobs", "rayjobs", "workloads"}
    assert validate["clientConfig"]["service"]["path"] == "/admission/k8s/validate"
    assert mutate["clientConfig"]["service"]["path"] == "/admission/k8s/mutate"
    assert validate["namespaceSelector"] == mutate["namespaceSelector"] and validate["rules"] == mutate["rules"]


def test_the_webhook_runs_highly_available_with_tls():
    docs = load()
    assert docs["Deployment"]["spec"]["replicas"] >= 3 and docs["PodDisruptionBudget"]["spec"]["minAvailable"] >= 2
    env = {e["name"]: e.get("value") for e in docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ALLOT_WEBHOOK_ONLY"] == "true" and env["GUNICORN_CERTFILE"]
    assert "allot-webhook.allot-system.svc" in docs["Certificate"]["spec"]["dnsNames"]
