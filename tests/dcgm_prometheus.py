"""A real Prometheus (Debian's package) scraping a small exporter that serves real dcgm-exporter
series (tests/fixtures/usage/dcgm) with the values a test sets, for the DCGM usage source.

The exporter serves each chosen series line exactly as the real exporter printed it (metric name and
labels verbatim), with the value replaced by the test's, and remembers every value it served so a
test can compute what Prometheus must answer. Prometheus scrapes it every second; its scrape target
carries ``namespace`` and ``pod`` labels of its own, as Kubernetes service discovery adds, so
Prometheus renames the exporter's to ``exported_namespace`` / ``exported_pod`` — as on real clusters.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.ports import free_port

SAMPLES = Path(__file__).parent / "fixtures" / "usage" / "dcgm"
SERIES = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<labels>\{.*\})\s+(?P<value>\S+)$")


def real_series() -> dict[str, str]:
    """Every series line of the real samples, keyed by a short name a test can pick:
    ``<metric>@<pod or 'unbound'>@<gpu>/<GPU_I_ID>`` → the line's name and labels, verbatim."""
    found: dict[str, str] = {}
    for path in sorted(SAMPLES.glob("*.prom")):
        for line in path.read_text().splitlines():
            match = SERIES.match(line.strip())
            if not match:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
            pod = labels.get("pod") or labels.get("pod_name") or "unbound"
            key = f"{match['name']}@{pod}@{labels.get('gpu', '')}/{labels.get('GPU_I_ID', '')}"
            found.setdefault(key, f"{match['name']}{match['labels']}")
    return found


PROGRESS = {
    "progress@cuda": 'allot_progress_steps_total{namespace="default",pod="cuda-75454ffb9f-8ljq7"}',
    "rate@cuda": 'allot_progress_fault_free_steps_per_second{namespace="default",pod="cuda-75454ffb9f-8ljq7"}',
}
"""A workload's own progress signal (accounting.policy.dcgm PROGRESS_DOC), served beside its GPU's series."""


def kueue_series(queue: str, cohort: str, flavor: str) -> dict[str, str]:
    """Kueue's queue metrics for one ClusterQueue, with the label sets of Kueue's metrics reference
    (tests/fixtures/usage/kueue/kueue-metrics-at-ff69552.csv): usage and reservation per flavor and resource,
    pending workloads per status."""
    base = (
        f'cohort="{cohort}",cluster_queue="{queue}",flavor="{flavor}",resource="nvidia.com/gpu",replica_role="leader"'
    )
    return {
        f"usage@{queue}@{flavor}": f"kueue_cluster_queue_resource_usage{{{base}}}",
        f"reservation@{queue}@{flavor}": f"kueue_cluster_queue_resource_reservation{{{base}}}",
        f"pending@{queue}": f'kueue_pending_workloads{{cluster_queue="{queue}",status="active",replica_role="leader"}}',
    }


KUEUE = kueue_series("acme.research.nlp", "acme.research", "a100")


class Exporter:
    """Serves the chosen real series at /metrics with the values set in ``values`` (key → value)."""

    def __init__(self) -> None:
        self.series = {**real_series(), **PROGRESS, **KUEUE}
        self.values: dict[str, Any] = {}
        self.served: dict[str, list[float]] = defaultdict(list)
        self.serving = True
        self.scrapes = 0
        self.lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with exporter.lock:
                    if not exporter.serving:
                        self.send_response(503)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    body = exporter.exposition().encode()
                    exporter.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def exposition(self) -> str:
        by_family: dict[str, list[str]] = defaultdict(list)
        for key, value in self.values.items():
            line = self.series[key]
            served = value() if callable(value) else value
            by_family[line.split("{", 1)[0]].append(f"{line} {served}")
            self.served[key].append(served)
        out = []
        for family, lines in by_family.items():
            out += [f"# TYPE {family} {'counter' if family.endswith('_total') else 'gauge'}", *lines]
        return "\n".join(out) + "\n"

    def choose(self, values: dict[str, Any]) -> None:
        """Values per series key: a number, or a callable giving the value of each scrape (a counter)."""
        with self.lock:
            self.values = dict(values)

    def stop_serving(self) -> None:
        with self.lock:
            self.serving = False

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class PrometheusServer:
    """Debian's prometheus on loopback, scraping ``exporter`` every second, data in a temp dir. ``history``:
    OpenMetrics text with timestamps, written into its database before it starts by Debian's
    ``promtool tsdb create-blocks-from openmetrics`` (Prometheus's own backfill), so it answers for hours past."""

    def __init__(self, exporter: Exporter, history: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="allot-prometheus-"))
        if history is not None:
            (self.dir / "history.om").write_text(history)
            backfill = [shutil.which("promtool") or "promtool", "tsdb", "create-blocks-from", "openmetrics"]
            done = subprocess.run(
                [*backfill, str(self.dir / "history.om"), str(self.dir / "data")], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise RuntimeError(f"promtool could not write the history: {done.stderr[-2000:]}")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = self.dir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "- job_name: dcgm-exporter\n"
            "  honor_labels: false\n"
            f"  static_configs:\n  - targets: ['127.0.0.1:{exporter.port}']\n"
            "    labels: {namespace: gpu-operator, pod: nvidia-dcgm-exporter-7xk2p}\n"
        )
        self.process = subprocess.Popen(
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "prometheus.log", "w"),  # noqa: SIM115 - closed with the process
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.close()
        raise RuntimeError(f"prometheus did not become ready: {(self.dir / 'prometheus.log').read_text()[-2000:]}")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
