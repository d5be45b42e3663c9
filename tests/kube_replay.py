"""A loopback HTTP server that replays exchanges captured from a real kube-apiserver.

Each incoming request must equal the next recorded request (method, path with query string,
Content-Type and JSON body); the recorded response is sent back as the server sent it. Mismatches
are collected in ``mismatches`` so a test can assert there were none.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class ReplayServer:
    def __init__(self, exchanges: list[dict[str, Any]]) -> None:
        self.exchanges = list(exchanges)
        self.mismatches: list[str] = []
        self.served = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                if server.served >= len(server.exchanges):
                    server.mismatches.append(f"unexpected {self.command} {self.path}")
                    self.send_response(500)
                    self.end_headers()
                    return
                recorded = server.exchanges[server.served]
                server.served += 1
                want = recorded["request"]
                for what, got, expected in (
                    ("method", self.command, want["method"]),
                    ("path", self.path, want["path"]),
                    ("body", body, want["body"]),
                    ("content type", self.headers.get("Content-Type"), want["headers"].get("Content-Type")),
                ):
                    if got != expected:
                        server.mismatches.append(f"{what}: sent {got!r}, the real server got {expected!r}")
                response = recorded["response"]
                payload = json.dumps(response["body"]).encode()
                self.send_response(response["status"], response.get("reason"))
                self.send_header("Content-Type", response["headers"].get("Content-Type", "application/json"))
                for name in ("Warning", "Audit-Id"):
                    if name in response["headers"]:
                        self.send_header(name, response["headers"][name])
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @classmethod
    def of(cls, directory: Path, *names: str) -> ReplayServer:
        return cls([json.loads(next(directory.glob(f"{name}*")).read_text()) for name in names])

    def __enter__(self) -> ReplayServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
