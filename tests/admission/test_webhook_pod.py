"""The webhook pod as deploy/kubernetes/base/webhook.yaml runs it, probed the way the kubelet probes it
(issue #40.2): the entrypoint's ``webhook`` role (gunicorn on loopback, two workers, the policy loaded before the
fork) behind the nginx front rendered from the shipped template, and the probes sent from another network
namespace to the pod's address — never to its loopback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.kube_cluster import Pki
from tests.kube_work import wait_for
from tests.ports import free_port
from tests.quotas.test_tasks import _test_database_url

pytestmark = [pytest.mark.postgres, pytest.mark.netns, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes" / "base"
HOST, POD = "10.213.7.1", "10.213.7.2"
TOKEN = "pod-test-token"
"""The pod's address (the host end of a veth pair made here) and the kubelet's, in a namespace of this test."""


def manifest_container(name: str) -> dict:
    docs = {d["kind"]: d for d in yaml.safe_load_all((BASE / "webhook.yaml").read_text()) if d}
    containers = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


@pytest.fixture
def kubelet_namespace():
    """A network namespace with a veth pair to this one: the pod at HOST, the kubelet at POD."""
    name, veth = f"allot-kubelet-{os.getpid()}", f"avk{os.getpid() % 100000}"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p"],
        ["ip", "link", "set", f"{veth}p", "netns", name],
        ["ip", "addr", "add", f"{HOST}/30", "dev", veth],
        ["ip", "link", "set", veth, "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", f"{POD}/30", "dev", f"{veth}p"],
        ["ip", "netns", "exec", name, "ip", "link", "set", f"{veth}p", "up"],
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def probe(namespace: str, probe_spec: dict, port: int) -> tuple[int, dict]:
    """An httpGet probe as the kubelet sends it: to the pod's IP, HTTPS without verifying the certificate."""
    scheme = probe_spec.get("scheme", "HTTP").lower()
    url = f"{scheme}://{HOST}:{port}{probe_spec['path']}"
    code = (
        "import json, ssl, sys, urllib.error, urllib.request\n"
        "ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n"
        "try:\n"
        f"    r = urllib.request.urlopen({url!r}, timeout=5, context=ctx); print(r.status, r.read().decode())\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code, e.read().decode())\n"
        "except OSError as e:\n"
        "    print(0, json.dumps({'error': str(e)}))\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", code], capture_output=True, text=True, timeout=30
    )
    status, _, body = done.stdout.strip().partition(" ")
    return int(status or 0), json.loads(body or "{}")


@pytest.fixture
def webhook_pod(tmp_path, demo):
    """The pod's two containers as the manifest configures them, ports aside (free ones here)."""
    gunicorn_port, front_port = free_port(), free_port()
    state = tmp_path / "admission"
    env = {
        **os.environ,
        "ALLOT_APP_DIR": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "DATABASE_URL": _test_database_url(),
        "ALLOT_ADMISSION_CLUSTER": demo.name,
        "ALLOT_ADMISSION_REFRESH_SECONDS": "1",
        "ALLOT_ROLE_FILE": str(tmp_path / "role"),
    }
    for item in manifest_container("webhook")["env"]:
        env[item["name"]] = item["value"]
    env["ALLOT_ADMISSION_TOKEN"] = TOKEN  # from the allot-env Secret in a cluster
    env["GUNICORN_BIND"] = f"127.0.0.1:{gunicorn_port}"  # the manifest's loopback bind, on a free port
    env["ALLOT_ADMISSION_STATE_DIR"] = str(state)
    webhook = subprocess.Popen(
        ["sh", str(ROOT / "deploy/container/entrypoint.sh"), "webhook"],
        env=env,
        stdout=(tmp_path / "gunicorn.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pki = Pki(tmp_path / "tls")
    front_env = {i["name"]: i["value"] for i in manifest_container("front")["env"]}
    listen = front_env["ALLOT_NGINX_LISTEN"].replace("8443", str(front_port))  # "8443 ssl": every address
    server = (BASE / "nginx-webhook.conf.template").read_text()
    for key, value in {
        "ALLOT_NGINX_LISTEN": listen,
        "ALLOT_NGINX_UPSTREAM": f"127.0.0.1:{gunicorn_port}",
        "ALLOT_NGINX_TLS_INCLUDE": str(tmp_path / "tls.conf"),
    }.items():
        server = server.replace("${" + key + "}", value)
    (tmp_path / "tls.conf").write_text(
        (BASE / "nginx-tls.conf")
        .read_text()
        .replace("/tls/tls.crt", str(pki.cert))
        .replace("/tls/tls.key", str(pki.key))
    )
    (tmp_path / "server.conf").write_text(server)
    temp = "\n".join(f"  {k}_temp_path {tmp_path}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (tmp_path / "nginx.conf").write_text(
        f"user root;\nworker_processes 1;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/nginx.log warn;\n"
        f"events {{ worker_connections 256; }}\nhttp {{\n{temp}\n  include {tmp_path}/server.conf;\n}}\n"
    )
    front = subprocess.Popen(
        [shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"]
    )
    try:
        wait_for(
            "two webhook workers published their state",
            lambda: len(list(state.glob("*.json"))) == 2 or (webhook.poll() is not None and _fail(tmp_path)),
            60,
        )
        yield {"front": front_port, "gunicorn": gunicorn_port, "state": state, "process": webhook, "log": tmp_path}
    finally:
        front.terminate()
        os.killpg(webhook.pid, signal.SIGTERM)
        webhook.wait(timeout=30)
        front.wait(timeout=10)


def _fail(tmp_path: Path) -> bool:
    raise AssertionError((tmp_path / "gunicorn.log").read_text()[-3000:])


def test_the_kubelets_probes_reach_every_worker_through_the_front_and_both_workers_can_decide(
    kubelet_namespace, webhook_pod, demo
):
    container = manifest_container("webhook")
    readiness, liveness = container["readinessProbe"]["httpGet"], container["livenessProbe"]["httpGet"]
    assert readiness["port"] == liveness["port"] == manifest_container("front")["ports"][0]["containerPort"]
    status, body = probe(kubelet_namespace, readiness, webhook_pod["front"])
    assert status == 200 and body["ready"] is True, body
    assert probe(kubelet_namespace, liveness, webhook_pod["front"])[0] == 200
    # gunicorn itself listens on loopback only: the probes as shipped before (port 8000) never reached it
    assert probe(kubelet_namespace, {"path": "/admission/readyz"}, webhook_pod["gunicorn"])[0] == 0
    # both workers were forked with the policy loaded (the master loaded it): each has a revision
    states = [json.loads(p.read_text()) for p in webhook_pod["state"].glob("*.json")]
    assert len(states) == 2 and all(s["revision"] for s in states), states


def test_an_edit_reaches_every_worker_within_the_refresh_bound(kubelet_namespace, webhook_pod, demo):
    """Two workers refresh on their own: after an edit, both decide by the new revision within
    ALLOT_ADMISSION_REFRESH_SECONDS (1 s here) plus a compile, never one of them indefinitely behind."""
    from quotas import services
    from quotas.models import AuditEvent, Quota
    from quotas.policy import Resource

    quota = Quota.objects.filter(unit__path="acme/research/rl", resource="nvidia.com/gpu").first()
    assert quota is not None
    services.quota_set(
        actor=None,
        reason="more for rl",
        unit_id=quota.unit_id,
        flavor_id=quota.flavor_id,
        resource=Resource(quota.resource),
        guarantee=quota.guarantee - 1,
    )
    newest = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()

    def converged():
        states = [json.loads(p.read_text()) for p in webhook_pod["state"].glob("*.json")]
        return len(states) == 2 and all(s["revision"] == newest for s in states)

    wait_for("both workers on the edit's revision", converged, 30)
    status, body = probe(kubelet_namespace, {"path": "/admission/readyz", "scheme": "HTTPS"}, webhook_pod["front"])
    assert status == 200 and body["worker_revisions"] == [newest], body


def test_a_refusals_line_reaches_the_pods_log_while_it_runs(webhook_pod):
    """The decision lines wait in the worker and are written by its background loop every 0.2 s (admission.lines):
    a refusal through the front reaches the pod's log while it runs, as one JSON object."""
    import ssl
    import urllib.request

    pod = {"containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "line-uid-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "nobodys",
            "operation": "CREATE",
            "object": {"metadata": {"name": "p", "namespace": "nobodys"}, "spec": pod},
        },
    }
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(
        f"https://127.0.0.1:{webhook_pod['front']}/admission/k8s/validate",
        data=json.dumps(review).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    answer = json.loads(urllib.request.urlopen(request, timeout=10, context=context).read())["response"]
    assert answer["allowed"] is False and answer["auditAnnotations"]["reason"] == "namespace_unbound"
    log = webhook_pod["log"] / "gunicorn.log"

    def logged() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines() if '"line-uid-1"' in line]

    wait_for("the refusal's line on the pod's log (written while it runs)", lambda: logged(), 10)
    (line,) = logged()
    assert line["reason"] == "namespace_unbound" and line["namespace"] == "nobodys" and line["at"].endswith("Z")
