"""The Kubernetes install: every overlay renders with `kubectl kustomize`, and every object in it is
valid against the real API server's OpenAPI v3 documents (types, required fields, no unknown fields)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.openapi import known, validate

KUSTOMIZE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUSTOMIZE / "overlays").iterdir() if (p / "kustomization.yaml").exists())
EXTERNAL = {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}
"""Kinds of operators the install relies on (cert-manager): not in a plain API server's documents."""

pytestmark = pytest.mark.kubectl


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the overlays (kubectl kustomize)"
    done = subprocess.run([kubectl, "kustomize", str(KUSTOMIZE / "overlays" / overlay)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_kind(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_there_are_overlays_for_development_and_production():
    assert OVERLAYS == ["dev", "production"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_against_the_api_servers_openapi(overlay):
    problems = {}
    for obj in render(overlay):
        if (obj["apiVersion"], obj["kind"]) in EXTERNAL:
            continue
        assert known(obj["apiVersion"], obj["kind"]), f"{obj['apiVersion']} {obj['kind']} is not served"
        found = validate(obj)
        if found:
            problems[f"{obj['kind']}/{obj['metadata']['name']}"] = found
    assert problems == {}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_process_is_there_with_what_operations_need(overlay):
    objects = by_kind(render(overlay))
    deployments = {name: o for (kind, name), o in objects.items() if kind == "Deployment"}
    assert set(deployments) == {"allot-web", "allot-webhook", "allot-worker", "allot-beat", "allot-usage-watcher"}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            assert container["resources"]["requests"], f"{name}/{container['name']} has no resource requests"
        allot = next(c for c in pod["containers"] if c["image"].endswith(("allot:0.1.0", "allot:dev")))
        role = "manage" if name == "allot-usage-watcher" else name.removeprefix("allot-")
        assert allot["args"][0] == role  # the role, chosen by command
    for name in ("allot-web", "allot-worker"):  # migrations before web and workers
        init = deployments[name]["spec"]["template"]["spec"]["initContainers"][0]
        assert init["args"] == ["wait-for-migrations"]
    watcher = deployments["allot-usage-watcher"]["spec"]
    assert watcher["replicas"] == 1 and watcher["strategy"]["type"] == "Recreate"
    command = watcher["template"]["spec"]["containers"][0]["args"]
    assert command == ["manage", "allot_watch_kueue", "--cluster", "$(ALLOT_WATCH_CLUSTER)"]
    beat = deployments["allot-beat"]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"  # plus the Redis lock
    webhook = deployments["allot-webhook"]["spec"]
    assert webhook["replicas"] >= 3
    assert objects[("PodDisruptionBudget", "allot-webhook")]["spec"]["minAvailable"] >= 2
    probe = webhook["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
    assert probe == "/admission/readyz"  # ready means "policy loaded"
    assert {n for k, n in objects if k == "HorizontalPodAutoscaler"} == {"allot-web", "allot-webhook"}
    assert ("NetworkPolicy", "allot-default-deny-ingress") in objects
    assert any(k == "Job" and n.startswith("allot-migrate") for k, n in objects)
    assert {k for k, _ in objects} >= {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ClusterRole"}


def test_production_has_an_ingress_a_release_named_migration_and_no_secret_values():
    objects = by_kind(render("production"))
    assert ("Ingress", "allot-web") in objects and ("Job", "allot-migrate-0-1-0") in objects
    assert not any(kind == "Secret" for kind, _ in objects)  # the operator creates allot-env
    policy = objects[("NetworkPolicy", "allot-webhook")]
    assert policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"]


def test_the_validator_catches_what_the_api_server_would_refuse():
    deployment = next(o for o in render("dev") if o["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["replica"] = 3  # a typo: unknown field
    broken["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": "8000"}]  # wrong type
    del broken["spec"]["selector"]  # required
    problems = validate(broken)
    assert any(p.endswith(".spec.replica: unknown field") for p in problems)
    assert any("containerPort: expected an integer" in p for p in problems)
    assert any(p.endswith(".spec.selector: required") for p in problems)
    assert validate(deployment) == []
