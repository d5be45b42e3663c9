"""What Allot's admission webhooks add to a Pod create, through a real kube-apiserver (issue #40.6).

    ALLOT_KUBE_ASSETS=/path/to/kube-assets python bench/admission_cluster.py

Starts the tests' control plane (tests/kube_cluster.py: etcd, kube-apiserver, Kueue) and the webhook
stack as the pod runs it (gunicorn with deploy/gunicorn.conf.py, ALLOT_WEBHOOK_ONLY=true, behind the
nginx front rendered from the shipped template, over TLS with a certificate the API server trusts; the
database holds the demo organisation), then creates GPU Pods in a governed, bound namespace for
BENCH_SECONDS (10) each at 1 and 8 creators (one kept-alive connection each), three ways, one after the other
BENCH_ROUNDS times (3) so that the machine's drift falls on every case alike (the figures are over every
round's creates together; each round's own p50 ratio is printed for the spread):

* ``none``  — no webhook registered: the API server's own cost, the floor;
* ``noop``  — deploy/kubernetes/base/webhook.yaml's two configurations registered exactly as shipped
  (rules, selectors, failure policies, timeouts) but pointing at /admission/k8s/noop of the same stack
  (parse, authenticate, allow): what any webhook on this stack costs;
* ``allot`` — the same configurations pointing at /admission/k8s/mutate and /admission/k8s/validate.

Added latency is each case's create time minus ``none``'s (median and p99). Where it goes: the API server's
own histogram of each webhook call (apiserver_admission_webhook_admission_duration_seconds, per webhook)
against Allot's own time per decision (the decision log's ``latency_ms`` of the phase's rows: an allowed
create writes no log line); the rest is TLS, nginx and gunicorn.
The LAST line is key=value pairs (added_p50_ms_<case>_<n>, added_p99_ms_<case>_<n>, ratio_p50_<n>,
ratio_p99_<n>, call_ms_<webhook>_<case>_<n>, decision_ms_<webhook>_<n>, creates_<case>_<n>).
"""

from __future__ import annotations

import base64
import http.client
import importlib.util
import json
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import django
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ALLOT_SECRET_KEY", "bench-only")

from tests.kube_cluster import ADMIN_TOKEN, WEBHOOK_TOKEN, start_for_session  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_admission", ROOT / "bench" / "admission.py")
assert _spec is not None and _spec.loader is not None
_stack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stack)  # bench/admission.py: the nginx front and the percentiles, shared
free_port, nginx_conf, pct, wait_ready = _stack.free_port, _stack.nginx_conf, _stack.pct, _stack.wait_ready

DURATION = int(os.environ.get("BENCH_SECONDS", "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WARM_SECONDS = 3  # before each phase: connections, informers, every gunicorn worker
NAMESPACE = "nlp"  # bound to research/nlp on the demo's k8s-west
MANIFEST = ROOT / "deploy" / "kubernetes" / "base" / "webhook.yaml"
LABELS = {
    "allot.dev/owner": "alice",
    "allot.dev/project": "llm-pretrain",
    "allot.dev/tier": "P1",
    "allot.dev/contract": "research-relaxed",
    "kueue.x-k8s.io/queue-name": "acme.research.nlp",
}
POD = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "bench-", "labels": LABELS},
        "spec": {
            "containers": [{"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
).encode()
HOOK_METRIC = re.compile(
    r"^apiserver_admission_webhook_admission_duration_seconds_(sum|count)\{([^}]*)\} ([0-9.e+-]+)$", re.M
)


def configurations(plane: Any, target: str) -> list[dict[str, Any]]:
    """webhook.yaml's configurations as shipped, in ``url:`` form at the front; ``noop`` points every
    webhook at the no-policy endpoint."""
    ca = base64.b64encode(plane.pki.ca.read_bytes()).decode()
    found = []
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        if not doc or not doc["kind"].endswith("WebhookConfiguration"):
            continue
        doc["metadata"].pop("annotations", None)
        for hook in doc["webhooks"]:
            path = "/admission/k8s/noop" if target == "noop" else hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{plane.webhook_port}{path}", "caBundle": ca}
        found.append(doc)
    return found


def register(plane: Any, target: str) -> None:
    for doc in configurations(plane, "allot"):
        plane.delete(_path(doc))
    if target != "none":
        for doc in configurations(plane, target):
            plane.apply_manifest(doc)
    time.sleep(2.0)  # the API server's webhook informers pick the change up


def _path(doc: dict[str, Any]) -> str:
    plural = doc["kind"].lower().replace("configuration", "configurations")
    return f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}"


def creates(plane: Any, creators: int, seconds: float = DURATION) -> list[float]:
    """Pod creates for ``seconds``, each creator on its own kept-alive TLS connection."""
    context = ssl.create_default_context(cafile=str(plane.pki.ca))
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    times: list[float] = []
    lock = threading.Lock()
    until = time.monotonic() + seconds

    def creator() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", plane.port, context=context, timeout=30)
        mine = []
        while time.monotonic() < until:
            began = time.perf_counter()
            conn.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=POD, headers=headers)
            answer = conn.getresponse()
            text = answer.read()
            if answer.status != 201:
                raise RuntimeError(f"create answered {answer.status}: {text[:500]!r}")
            mine.append((time.perf_counter() - began) * 1000)
        conn.close()
        with lock:
            times.extend(mine[1:])  # the first paid the TLS handshake

    threads = [threading.Thread(target=creator) for _ in range(creators)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    plane.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods")  # no kubelet: gone at once
    return sorted(times)


def hook_totals(plane: Any) -> dict[str, tuple[float, float]]:
    """Per webhook name: (seconds, calls) the API server spent calling it, so far."""
    text = plane.get("/metrics", raw=True).decode()
    totals: dict[str, list[float]] = {}
    for part, labels, value in HOOK_METRIC.findall(text):
        name = re.search(r'name="([^"]*)"', labels)
        if name is None:
            continue
        entry = totals.setdefault(name.group(1), [0.0, 0.0])
        entry[0 if part == "sum" else 1] += float(value)
    return {k: (v[0], v[1]) for k, v in totals.items()}


def decisions(since: datetime) -> dict[str, float]:
    """Allot's own mean milliseconds per decision, per webhook, from the decision log's rows since ``since``
    (written in batches every 0.2 s: read after the phase has settled)."""
    from django.db.models import Avg

    from admission.models import AdmissionDecision

    rows = AdmissionDecision.objects.filter(at__gte=since, namespace=NAMESPACE)
    return {row["webhook"]: row["ms"] for row in rows.values("webhook").annotate(ms=Avg("latency_ms"))}


def phase(plane: Any, case: str, creators: int) -> dict[str, Any]:
    """One case's creates, with the API server's time per webhook call and (for Allot) its decision times."""
    from django.utils import timezone

    register(plane, case)
    creates(plane, creators, WARM_SECONDS)
    before, since = hook_totals(plane), timezone.now()
    times = creates(plane, creators)
    after = hook_totals(plane)
    calls = {}
    for name, (seconds, count) in after.items():
        was = before.get(name, (0.0, 0.0))
        if count > was[1]:
            calls[name] = (seconds - was[0]) / (count - was[1]) * 1000
    found = {"times": times, "calls": calls, "decisions": {}}
    if case == "allot":
        time.sleep(0.5)  # the decision log is flushed every 0.2 s
        found["decisions"] = decisions(since)
    return found


def report(creators: int, rounds: list[dict[str, dict[str, Any]]], figures: dict[str, float]) -> None:
    """Print and add each case's figures over every round's creates together (every case ran once a round, so the
    machine's drift falls on all alike), and each round's own p50 ratio for the spread."""

    def ratio(floor: list[float], noop: list[float], allot: list[float], q: float) -> float:
        return (pct(allot, q) - pct(floor, q)) / max(pct(noop, q) - pct(floor, q), 0.01)

    pooled = {case: sorted(t for one in rounds for t in one[case]["times"]) for case in ("none", "noop", "allot")}
    for case in ("none", "noop", "allot"):
        times = pooled[case]
        p50, p99 = pct(times, 0.5), pct(times, 0.99)
        figures[f"creates_{case}_{creators}"] = len(times)
        line = f"{creators} creator(s), {case:>5}: {len(times):,} creates, p50 {p50:.2f} ms, p99 {p99:.2f} ms"
        if case != "none":
            added50, added99 = p50 - pct(pooled["none"], 0.5), p99 - pct(pooled["none"], 0.99)
            figures[f"added_p50_ms_{case}_{creators}"] = added50
            figures[f"added_p99_ms_{case}_{creators}"] = added99
            line += f"; added p50 {added50:.2f} ms, p99 {added99:.2f} ms"
            for name in sorted({n for one in rounds for n in one[case]["calls"]}):
                per = statistics.mean(one[case]["calls"][name] for one in rounds if name in one[case]["calls"])
                figures[f"call_ms_{name.split('.')[0]}_{case}_{creators}"] = per
                line += f"; API server's {name} call {per:.2f} ms"
        for hook in sorted({h for one in rounds for h in one[case]["decisions"]}):
            ms = statistics.mean(one[case]["decisions"][hook] for one in rounds if hook in one[case]["decisions"])
            figures[f"decision_ms_{hook}_{creators}"] = ms
            line += f"; Allot's {hook} decision {ms:.3f} ms"
        print(line, flush=True)
    ratio50 = ratio(pooled["none"], pooled["noop"], pooled["allot"], 0.5)
    ratio99 = ratio(pooled["none"], pooled["noop"], pooled["allot"], 0.99)
    figures[f"ratio_p50_{creators}"], figures[f"ratio_p99_{creators}"] = ratio50, ratio99
    each = [ratio(one["none"]["times"], one["noop"]["times"], one["allot"]["times"], 0.5) for one in rounds]
    print(
        f"{creators} creator(s): ratio p50 {ratio50:.2f}, p99 {ratio99:.2f} over {len(rounds)} rounds "
        f"(each round's p50 ratio: {', '.join(f'{r:.2f}' for r in each)})",
        flush=True,
    )


def main() -> None:
    if not os.environ.get("ALLOT_KUBE_ASSETS"):
        print("skipped: set ALLOT_KUBE_ASSETS to the kube-assets folder (see tests/kube_cluster.py)")
        return
    work = Path(tempfile.mkdtemp(prefix="allot-bench-cluster-"))
    env = {
        **os.environ,
        "ALLOT_VAR_DIR": str(work),
        "ALLOT_ADMISSION_TOKEN": WEBHOOK_TOKEN,
        "ALLOT_ADMISSION_CLUSTER": "k8s-west",
        "ALLOT_ADMISSION_STATE_DIR": str(work / "admission"),
        "ALLOT_LOG_LEVEL": "INFO",
    }
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([python, "manage.py", "allot_demo"], cwd=ROOT, env=env, check=True, capture_output=True)
    os.environ.update({**env, "DJANGO_SETTINGS_MODULE": "config.settings"})  # the server's database
    django.setup()  # this process reads the decision log
    print("starting the control plane …", flush=True)
    plane = start_for_session(work)
    upstream, plain = free_port(), free_port()
    log = work / "gunicorn.log"
    server = subprocess.Popen(
        [python, "-m", "gunicorn", "config.wsgi", "-c", "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{upstream}"],
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**env, "ALLOT_WEBHOOK_ONLY": "true"},
        start_new_session=True,
    )
    conf = nginx_conf(work, plain, upstream, plane.webhook_port, cert=(plane.pki.cert, plane.pki.key))
    front = subprocess.Popen(["nginx", "-c", str(conf), "-g", "daemon off;"])
    figures: dict[str, float] = {}
    try:
        wait_ready(f"http://127.0.0.1:{plain}/admission/readyz")
        plane.apply_manifest(
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": NAMESPACE, "labels": {"allot.dev/governed": "true"}}}
        )  # fmt: skip
        for creators in (1, 8):
            rounds = [{case: phase(plane, case, creators) for case in ("none", "noop", "allot")} for _ in range(ROUNDS)]
            report(creators, rounds, figures)
        register(plane, "none")
        load = os.getloadavg()
        print(f"load average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)", flush=True)
    finally:
        front.terminate()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        front.wait(timeout=10)
        plane.stop()
    print(" ".join(f"{k}={v:.0f}" if k.startswith("creates") else f"{k}={v:.2f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
