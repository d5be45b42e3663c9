"""Benchmark the admission webhook in its production configuration, on loopback.

    python bench/admission.py

Starts the webhook as the deployment runs it — gunicorn (deploy/gunicorn.conf.py: gthread workers,
keep-alive; ALLOT_WEBHOOK_ONLY=true) on loopback behind nginx (keep-alive to gunicorn too), rendered
from the deployment's own deploy/kubernetes/base/nginx-webhook.conf.template —
against a database holding the demo organisation (DATABASE_URL, or a fresh SQLite file). Drives it
with wrk (wrk and nginx are installed with apt-get when missing) for 10 s at 1, 16 and 64
connections with the 20 documented reviews (the 2 captured ones and 18 synthetic ones of every kind,
allowed and denied): /admission/k8s/validate, then the no-policy endpoint /admission/k8s/noop of the
same stack, BENCH_ROUNDS times (3), the round with the median ratio reported; then Pod creates as the
API server makes them — over TLS, one kept-alive
connection per creator, a mutating then a validating review per create — at 1 and 16 creators,
beside the same creates against the no-op endpoint of the same stack (its floor); then once more at
16 connections while SLOW_CLIENTS other connections send their reviews one byte every 200 ms (clients
on a bad link must not delay everybody else). Prints the figures and the machine's load average; the
LAST line is key=value pairs (rps_N, p50_ms_N, p99_ms_N, noop_rps_N, ratio_N; cpu_us_N and noop_cpu_us_N, the
CPU gunicorn and nginx spent per review, read from /proc, and their cpu_ratio_N; create_added_ms_p50_N,
create_added_ms_p99_N, noop_create_ms_p50_N, create_ratio_p50_N, slow_rps_16, slow_p99_ms_16, load_1m).
For quick side-by-side runs: BENCH_CONNECTIONS=16 (which wrk phases) and BENCH_ONLY_WRK=1 (no creates, no
slow clients).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "fixtures" / "admission-samples"
TOKEN = "bench-token"
DURATION = int(os.environ.get("BENCH_SECONDS", "10"))
SLOW_CLIENTS = int(os.environ.get("BENCH_SLOW_CLIENTS", "4"))
CONNECTIONS = tuple(int(n) for n in os.environ.get("BENCH_CONNECTIONS", "1,16,64").split(","))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))  # wrk phases alternate validate and the no-op this many times
ONLY_WRK = os.environ.get("BENCH_ONLY_WRK") == "1"  # the wrk phases alone: for quick side-by-side runs
DISTINCT = 20  # the captured reviews plus 18 synthetic ones, as documented
LUA = """
local bodies = {}
init = function(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
end
request = function()
  return wrk.format("POST", wrk.path, nil, bodies[math.random(#bodies)])
end
"""


def ensure(command: str, package: str) -> str:
    found = shutil.which(command) or (Path("/usr/sbin") / command if (Path("/usr/sbin") / command).exists() else None)
    if found:
        return str(found)
    print(f"installing {package} with apt-get …", flush=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, capture_output=True)
    return shutil.which(command) or f"/usr/sbin/{command}"


def nginx_conf(
    work: Path, listen: int, upstream: int, tls_listen: int | None = None, cert: tuple[Path, Path] | None = None
) -> Path:
    """The deployment's nginx front (deploy/kubernetes/base/nginx-webhook.conf.template) rendered for
    loopback, inside a minimal main configuration; with ``tls_listen`` a second server block serves the
    same upstream over TLS (the deployment's nginx-tls.conf settings; ``cert`` is a (certificate, key)
    pair, else a self-signed one is made)."""
    template = (ROOT / "deploy" / "kubernetes" / "base" / "nginx-webhook.conf.template").read_text()
    servers = []
    for port, include in ((listen, str(work / "no-tls-*.conf")), (tls_listen, str(work / "tls.conf"))):
        if port is None:
            continue
        server = template
        for name, value in {
            "ALLOT_NGINX_LISTEN": f"127.0.0.1:{port}" + (" ssl" if include.endswith("tls.conf") else ""),
            "ALLOT_NGINX_UPSTREAM": f"127.0.0.1:{upstream}",
            "ALLOT_NGINX_TLS_INCLUDE": include,
        }.items():
            server = server.replace("${" + name + "}", value)
        if servers:  # one upstream block for both servers
            server = server[server.index("server {") :]
        servers.append(server)
    if tls_listen is not None and cert is not None:
        shutil.copy(cert[0], work / "tls.crt")
        shutil.copy(cert[1], work / "tls.key")
    elif tls_listen is not None:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=allot-webhook",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(work / "tls.key"), "-out", str(work / "tls.crt")],
            check=True, capture_output=True,
        )  # fmt: skip
    if tls_listen is not None:
        tls = (ROOT / "deploy" / "kubernetes" / "base" / "nginx-tls.conf").read_text().replace("/tls/", f"{work}/")
        (work / "tls.conf").write_text(tls)
    (work / "webhook.conf").write_text("\n".join(servers))
    temp = "\n".join(
        f"    {kind}_temp_path {work}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    main = (
        f"user root;\nworker_processes auto;\npid {work}/nginx.pid;\nerror_log {work}/nginx-error.log warn;\n"
        f"events {{ worker_connections 4096; }}\nhttp {{\n{temp}\n    include {work}/webhook.conf;\n}}\n"
    )
    (work / "nginx.conf").write_text(main)
    return work / "nginx.conf"


def creates(port: int, cafile: Path, paths: tuple[str, str], body: list[bytes], creators: int) -> list[float]:
    """Pod creates the way the API server makes them: each creator keeps one TLS connection open
    (keep-alive) and for every create sends the mutating review, then the validating one, and waits
    for both answers. Returns each create's milliseconds (both calls), for DURATION seconds."""
    import http.client
    import ssl

    context = ssl.create_default_context(cafile=str(cafile))
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    times: list[float] = []
    lock = threading.Lock()
    until = time.monotonic() + DURATION

    def creator(index: int) -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        mine, n = [], index
        while time.monotonic() < until:
            review = body[n % len(body)]
            n += creators
            began = time.perf_counter()
            for path in paths:
                conn.request("POST", path, body=review, headers=headers)
                answer = conn.getresponse()
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"{path}: {answer.status}")
            mine.append((time.perf_counter() - began) * 1000)
        conn.close()
        with lock:
            times.extend(mine[1:])  # the first paid the TLS handshake, as the API server's first call does

    threads = [threading.Thread(target=creator, args=(i,)) for i in range(creators)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(times)


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def wait_ready(url: str, seconds: float = 30.0) -> None:
    """Poll a readiness URL until it answers 2xx (or the time is up: the bench's first call then says why)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bodies() -> list[str]:
    """Captured requests (their namespace is unbound: denials) and synthetic ones for every kind."""
    found = [json.dumps(json.loads(p.read_text())) for p in sorted(SAMPLES.glob("*.json"))]
    labels = {
        "allot.dev/owner": "alice",
        "allot.dev/project": "llm-pretrain",
        "allot.dev/tier": "P1",
        "allot.dev/contract": "research-relaxed",
        "kueue.x-k8s.io/queue-name": "acme.research.nlp",
        "kueue.x-k8s.io/priority-class": "allot-p1",
    }
    pod = {"containers": [{"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    template = {"spec": pod}
    kinds = {
        ("", "Pod"): pod,
        ("batch", "Job"): {"parallelism": 4, "template": template},
        ("jobset.x-k8s.io", "JobSet"): {
            "replicatedJobs": [
                {"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": template}}}
            ]
        },
        ("kubeflow.org", "PyTorchJob"): {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 3, "template": template},
            }
        },
        ("ray.io", "RayJob"): {
            "rayClusterSpec": {
                "headGroupSpec": {"template": template},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 3, "template": template}],
            }
        },
        ("kueue.x-k8s.io", "Workload"): {
            "queueName": "acme.research.nlp",
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "allot-p1"},
            "podSets": [{"name": "main", "count": 4, "template": template}],
        },
    }
    for i, ((group, kind), spec) in enumerate(kinds.items()):
        for variant, (owner, gpus) in enumerate((("alice", "2"), ("alice", "500"), ("mallory", "1"))):
            text = json.dumps(spec).replace('"nvidia.com/gpu": "2"', f'"nvidia.com/gpu": "{gpus}"')
            found.append(
                json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "request": {
                            "uid": f"bench-{i}-{variant}",
                            "kind": {"group": group, "version": "v1", "kind": kind},
                            "namespace": "nlp",
                            "operation": "CREATE",
                            "dryRun": False,
                            "object": {
                                "metadata": {
                                    "name": f"w{i}",
                                    "namespace": "nlp",
                                    "labels": {**labels, "allot.dev/owner": owner},
                                },
                                "spec": json.loads(text),
                            },
                        },
                    }
                )
            )
    return found


def _find(pattern: str, text: str) -> re.Match[str]:
    found = re.search(pattern, text, re.M)
    if found is None:
        raise RuntimeError(f"wrk printed no {pattern!r}:\n{text}")
    return found


def cpu_seconds(roots: tuple[int, ...]) -> float:
    """User + system CPU seconds of the processes ``roots`` and their children so far (gunicorn's master and
    workers, nginx's): read from /proc, so a phase's cost per review is what the stack spent on it, whatever
    else the machine did meanwhile (a VM's neighbours move throughput by a fifth between phases)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid in roots or ppid in roots:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def run_wrk(wrk: str, url: str, script: Path, data: Path, connections: int) -> tuple[float, float, float]:
    threads = min(connections, 2)
    out = subprocess.run(
        [
            wrk,
            f"-t{threads}",
            f"-c{connections}",
            f"-d{DURATION}s",
            "--latency",
            "-s",
            str(script),
            "-H",
            f"Authorization: Bearer {TOKEN}",
            "-H",
            "Content-Type: application/json",
            url,
            "--",
            str(data),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rps = float(_find(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{errors[1]} non-2xx responses from {url}:\n{out}")

    def pct(p: str) -> float:
        value, unit = _find(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out).groups()
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return rps, pct("50"), pct("99")


def slow_clients(port: int, body: bytes, stop: threading.Event) -> list[threading.Thread]:
    """Connections that send a review one byte every 200 ms until ``stop`` (then they hang up)."""

    def dribble() -> None:
        head = (
            f"POST /admission/k8s/validate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", port)) as conn:
            for i in range(len(head) + len(body)):
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall((head + body)[i : i + 1])
                except OSError:  # the front dropped it (client_header/body_timeout): as it should
                    dropped.append(i)
                    return

    dropped: list[int] = []
    threads = [threading.Thread(target=dribble, daemon=True) for _ in range(SLOW_CLIENTS)]
    for thread in threads:
        thread.start()
    return threads


def main() -> None:
    wrk = ensure("wrk", "wrk")
    nginx = ensure("nginx", "nginx-core")
    work = Path(tempfile.mkdtemp(prefix="allot-bench-"))
    env = {
        **os.environ,
        "ALLOT_SECRET_KEY": "bench-only",
        "ALLOT_VAR_DIR": str(work),
        "ALLOT_ADMISSION_TOKEN": TOKEN,
        "ALLOT_ADMISSION_CLUSTER": "k8s-west",
        "ALLOT_LOG_LEVEL": os.environ.get("ALLOT_LOG_LEVEL", "INFO"),
    }
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([python, "manage.py", "allot_demo"], cwd=ROOT, env=env, check=True, capture_output=True)
    (work / "bodies.txt").write_text("\n".join(bodies()) + "\n")
    (work / "post.lua").write_text(LUA)
    port, upstream = free_port(), free_port()
    server_log = open(work / "gunicorn.log", "w")  # noqa: SIM115 - closed with the server
    server = subprocess.Popen(
        [python, "-m", "gunicorn", "config.wsgi", "-c", "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{upstream}"],
        cwd=ROOT,
        stdout=server_log,
        stderr=server_log,
        env={**env, "ALLOT_WEBHOOK_ONLY": "true"},  # deploy/gunicorn.conf.py as deployed: gthread, keep-alive
        start_new_session=True,
    )
    tls_port = free_port()
    front = subprocess.Popen([nginx, "-c", str(nginx_conf(work, port, upstream, tls_port)), "-g", "daemon off;"])
    base = f"http://127.0.0.1:{port}/admission"
    stack = (server.pid, front.pid)  # gunicorn's master and nginx's, each with its workers
    figures: dict[str, float] = {}
    try:
        wait_ready(f"{base}/readyz")
        mix = {"allowed": 0, "denied": 0}
        for _ in range(4):  # warms every worker's policy cache, and shows the mix of decisions driven
            for body in bodies():
                req = urllib.request.Request(
                    f"{base}/k8s/validate",
                    data=body.encode(),
                    method="POST",
                    headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                )
                answer = json.loads(urllib.request.urlopen(req, timeout=10).read())["response"]
                mix["allowed" if answer["allowed"] else "denied"] += 1
        distinct = len(bodies())
        assert distinct == DISTINCT, f"{distinct} distinct reviews, expected {DISTINCT}"
        print(
            f"request mix: {distinct} distinct reviews, {mix['allowed'] // 4} allowed and {mix['denied'] // 4} denied",
            flush=True,
        )
        for connections in CONNECTIONS:
            rounds = []  # validate then the no-op, ROUNDS times: the machine's drift falls on both alike
            spent = {"validate": 0.0, "noop": 0.0}  # the stack's CPU seconds, and the reviews they served
            served = {"validate": 0.0, "noop": 0.0}
            for _ in range(ROUNDS):
                phases = []
                for endpoint in ("validate", "noop"):
                    before = cpu_seconds(stack)
                    phase = run_wrk(wrk, f"{base}/k8s/{endpoint}", work / "post.lua", work / "bodies.txt", connections)
                    spent[endpoint] += cpu_seconds(stack) - before
                    served[endpoint] += phase[0] * DURATION
                    phases.append(phase)
                rounds.append((phases[0][0] / phases[1][0], phases[0], phases[1]))
            _, (rps, p50, p99), (noop_rps, _, noop_p99) = sorted(rounds, key=lambda r: r[0])[len(rounds) // 2]
            cpu_us = {k: spent[k] / served[k] * 1e6 for k in spent}
            print(
                f"{connections:>2} connections: validate {rps:,.0f} reviews/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms; "
                f"no-policy {noop_rps:,.0f}/s (p99 {noop_p99:.2f} ms); ratio {rps / noop_rps:.2f} (the median of "
                f"{ROUNDS} rounds: {', '.join(f'{r[0]:.2f}' for r in rounds)}); the stack's CPU per review "
                f"{cpu_us['validate']:.0f} µs against the no-op's {cpu_us['noop']:.0f} µs "
                f"(ratio {cpu_us['noop'] / cpu_us['validate']:.2f})",
                flush=True,
            )
            figures.update(
                {
                    f"cpu_us_{connections}": cpu_us["validate"],
                    f"noop_cpu_us_{connections}": cpu_us["noop"],
                    f"cpu_ratio_{connections}": cpu_us["noop"] / cpu_us["validate"],
                }
            )
            figures.update(
                {
                    f"rps_{connections}": rps,
                    f"p50_ms_{connections}": p50,
                    f"p99_ms_{connections}": p99,
                    f"noop_rps_{connections}": noop_rps,
                    f"noop_p99_ms_{connections}": noop_p99,
                    f"ratio_{connections}": rps / noop_rps,
                }
            )
        encoded = [b.encode() for b in bodies()]
        for creators in () if ONLY_WRK else (1, 16):
            allot = creates(tls_port, work / "tls.crt", ("/admission/k8s/mutate", "/admission/k8s/validate"), encoded,
                            creators)  # fmt: skip
            floor = creates(
                tls_port, work / "tls.crt", ("/admission/k8s/noop", "/admission/k8s/noop"), encoded, creators
            )
            p50, p99, n50, n99 = pct(allot, 0.5), pct(allot, 0.99), pct(floor, 0.5), pct(floor, 0.99)
            print(
                f"{creators:>2} creators, TLS and keep-alive, mutate + validate per create: p50 {p50:.2f} ms, "
                f"p99 {p99:.2f} ms ({len(allot):,} creates); no-op stack p50 {n50:.2f} ms, p99 {n99:.2f} ms; "
                f"Allot's own share p50 {p50 - n50:.2f} ms",
                flush=True,
            )
            figures.update(
                {
                    f"create_added_ms_p50_{creators}": p50,
                    f"create_added_ms_p99_{creators}": p99,
                    f"noop_create_ms_p50_{creators}": n50,
                    f"noop_create_ms_p99_{creators}": n99,
                    f"create_ratio_p50_{creators}": p50 / n50,
                }
            )
        if ONLY_WRK:
            print(" ".join(f"{k}={v:.2f}" for k, v in figures.items()), flush=True)
            return
        stop = threading.Event()
        dribblers = slow_clients(port, bodies()[-1].encode(), stop)
        time.sleep(1.0)  # they hold their connections before the load starts
        try:
            rps, p50, p99 = run_wrk(wrk, f"{base}/k8s/validate", work / "post.lua", work / "bodies.txt", 16)
        finally:
            stop.set()
            for thread in dribblers:
                thread.join(timeout=5)
        print(
            f"16 connections beside {SLOW_CLIENTS} slow clients: {rps:,.0f} reviews/s, p50 {p50:.2f} ms, "
            f"p99 {p99:.2f} ms",
            flush=True,
        )
        figures.update({"slow_rps_16": rps, "slow_p99_ms_16": p99})
        load = os.getloadavg()
        print(f"load average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)", flush=True)
        figures["load_1m"] = load[0]
    finally:
        front.terminate()
        front.wait(timeout=30)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        server_log.close()
    print(
        " ".join(
            f"{k}={v:.0f}" if k.startswith(("rps", "noop_rps", "slow_rps")) else f"{k}={v:.2f}"
            for k, v in figures.items()
        )
    )


if __name__ == "__main__":
    main()
