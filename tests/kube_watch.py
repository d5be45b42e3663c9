"""A loopback kube-apiserver that plays a script of list and watch exchanges, for the Kueue usage
source. Each request must match the next step (method, path, query parameters); the step's answer is
sent as the API server sends it:

* ``{"status": 200, "body": {...}}`` — a list (or any JSON answer);
* ``{"events": [...], "end": "close" | "drop" | "hold"}`` — a watch: a chunked 200 response with one
  JSON event per line (``{"type": "MODIFIED", "object": {...}}``), then either the final chunk (the
  server ended the watch: its ``timeoutSeconds`` passed), a connection closed mid-stream (a watch that
  drops: load balancer, API server restart), or nothing more until ``release`` is set (a quiet watch);
* a 410 is the event ``{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason":
  "Expired", ...}}`` inside a 200 watch response, which is how the API server says a resourceVersion
  is too old (kubernetes.io/docs/reference/using-api/api-concepts, "Efficient detection of changes").

No API server runs on these machines, so these exchanges are written in that documented wire
format, not captured. Mismatches are kept in ``mismatches``. ClusterQueues are not scripted (the watcher
follows them on a thread of their own): the server has none, and a watch of them stays quiet.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"


def expired(resource_version: str, current: str) -> dict[str, Any]:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"too old resource version: {resource_version} ({current})",
            "reason": "Expired",
            "code": 410,
        },
    }


def list_step(items: list[dict[str, Any]], version: str) -> dict[str, Any]:
    return {
        "request": {"path": WORKLOADS, "query": {"limit": "500"}},
        "status": 200,
        "body": {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadList",
            "metadata": {"resourceVersion": version},
            "items": items,
        },
    }


def watch_step(since: str, events: list[dict[str, Any]], *, end: str = "close", timeout: int = 5) -> dict[str, Any]:
    query = {
        "watch": "true",
        "resourceVersion": since,
        "timeoutSeconds": str(timeout),
        "allowWatchBookmarks": "true",
    }
    return {"request": {"path": WORKLOADS, "query": query}, "events": events, "end": end}


DISCOVERY = {
    "kind": "APIGroupList",
    "apiVersion": "v1",
    "groups": [
        {
            "name": "kueue.x-k8s.io",
            "versions": [{"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}],
            "preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"},
        }
    ],
}
"""What ``GET /apis`` answers: a Kueue serving v1beta2."""


class WatchScriptServer:
    def __init__(self, steps: list[dict[str, Any]]) -> None:
        self.steps = list(steps)
        self.served = 0
        self.release = threading.Event()
        """Ends a watch step whose ``end`` is ``hold`` (a watch with no further event)."""
        self.mismatches: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if (
                    self.path.rstrip("/") == "/apis"
                ):  # API discovery (which Kueue version to speak): not a scripted step
                    data = json.dumps(DISCOVERY).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if "/clusterqueues" in self.path:  # the watcher's ClusterQueue thread: a cluster without any
                    self._no_queues()
                    return
                if server.served >= len(server.steps):
                    server.mismatches.append(f"unexpected GET {self.path}")
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                step = server.steps[server.served]
                server.served += 1
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                want = step["request"]
                if url.path != want["path"] or query != want["query"]:
                    server.mismatches.append(f"step {server.served}: sent {url.path} {query}, expected {want}")
                if "events" not in step:
                    data = json.dumps(step["body"]).encode()
                    self.send_response(step["status"])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in step["events"]:
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                if step["end"] == "hold":  # a quiet watch: nothing more until the test releases it
                    server.release.wait(60)
                if step["end"] in ("close", "hold"):
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                else:  # drop: half a chunk, then the connection goes
                    self.wfile.write(b'40\r\n{"type": "MODIFIED"')
                    self.wfile.flush()
                self.close_connection = True

            def _no_queues(self) -> None:
                """ClusterQueues are not scripted: an empty list, and a watch that stays quiet until released."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if "watch=" not in self.path:
                    data = json.dumps({"kind": "ClusterQueueList", "metadata": {"resourceVersion": "1"}, "items": []})
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data.encode())
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                server.release.wait(60)
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> WatchScriptServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
