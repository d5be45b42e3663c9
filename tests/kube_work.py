"""Work on the real control plane of tests/kube_cluster.py: namespaces, suspended GPU Jobs and their Workloads,
waiting for what Kueue does, and Allot's admission webhooks served over TLS and registered in ``url:`` form."""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

import yaml

from tests.kube_cluster import ControlPlane


def namespace(plane: ControlPlane, name: str, labels: dict[str, str] | None = None) -> None:
    plane.apply_manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})


def gpu_job(
    name: str,
    ns: str,
    queue: str,
    gpus: int,
    *,
    priority: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A suspended Job asking for ``gpus`` devices in one pod, queued to ``queue`` (Kueue unsuspends it)."""
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if node_selector:
        pod["nodeSelector"] = node_selector
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {"spec": pod}},
    }


def workloads(plane: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    """The namespace's Workloads by the name of the Job that owns each."""
    found = plane.get(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads")["items"]
    out = {}
    for wl in found:
        owner = next((r["name"] for r in wl["metadata"].get("ownerReferences") or []), wl["metadata"]["name"])
        out[owner] = wl
    return out


def condition(wl: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def admitted(wl: dict[str, Any] | None) -> bool:
    found = condition(wl, "Admitted")
    return bool(found and found["status"] == "True")


def wait_for(what: str, check: Any, seconds: float = 60, every: float = 0.25) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {seconds} s (last: {last!r})")


def delete_jobs(plane: ControlPlane, ns: str) -> None:
    """Every Job of the namespace and its Workload, and wait until Kueue no longer counts them."""
    plane.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs", {"propagationPolicy": "Background"})
    for wl in workloads(plane, ns).values():
        plane.delete(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads/{wl['metadata']['name']}")
    wait_for(
        f"workloads of {ns} gone",
        lambda: not plane.get(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/workloads")["items"],
        60,
    )


class WebhookServer:
    """Allot's Django application (the test database) over HTTPS on ``plane.webhook_port``, so the real API
    server calls Allot's admission webhooks registered in ``url:`` form."""

    def __init__(self, plane: ControlPlane) -> None:
        import threading
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        from django.core.wsgi import get_wsgi_application

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

        class Threading(ThreadingMixIn, WSGIServer):
            daemon_threads = True

        self.httpd = make_server(
            "127.0.0.1", plane.webhook_port, get_wsgi_application(), server_class=Threading, handler_class=Quiet
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(plane.pki.cert), str(plane.pki.key))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def registered_webhooks(plane: ControlPlane, manifest: Path, **selector: Any) -> list[dict[str, Any]]:
    """The Validating/MutatingWebhookConfigurations of ``manifest`` as shipped, in ``url:`` form pointing at
    :class:`WebhookServer` (no Service or DNS here) with the test CA; ``selector`` replaces namespaceSelector."""
    import base64

    ca = base64.b64encode(plane.pki.ca.read_bytes()).decode()
    found = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc or doc["kind"] not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            continue
        doc["metadata"].pop("annotations", None)
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{plane.webhook_port}{path}", "caBundle": ca}
            if selector:
                hook["namespaceSelector"] = selector
        found.append(doc)
    return found
