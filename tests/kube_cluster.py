"""A real Kubernetes control plane and a real Kueue on loopback, for tests (like controller-runtime's envtest).

The binaries come from ``ALLOT_KUBE_ASSETS`` (a folder with ``kube-apiserver.xz``,
``kube-controller-manager.xz``, ``kueue.xz`` and ``kueue-v<N>/crds``; ``.ci/run`` points it at the
workplace's assets). etcd is Debian's ``etcd-server``. One control plane serves a whole test session;
tests take a namespace each (and name their queues apart) so they do not see each other's work; the helpers to
create and watch work on it are in tests/kube_work.py.

What runs: etcd, kube-apiserver (RBAC, token authentication, the admission webhooks plugins),
kube-controller-manager (the Job and garbage-collector controllers, as service accounts) and Kueue's
manager (scheduler and the batch/job integration; its own webhooks are not registered, so tests create
Jobs already suspended with their queue label, which Kueue admits the same way). Nothing needs a
kubelet: Pods stay Pending; Kueue admits and preempts against quota, not nodes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import lzma
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quotas.policy.kueue.config import kueue_configuration
from quotas.policy.sharing import flavor_sharing
from tests.ports import free_port

SHARED_FLAVORS = {
    "h100-mig": flavor_sharing("mig", accelerator_model="NVIDIA H100 80GB HBM3", memory_gb=80),
    "gpu-shared": flavor_sharing("time-slicing", shares=4),
}
"""The shared flavors the plane's Kueue counts in GPU-equivalents (its configuration's transformations, as
Allot serves them for a cluster with these flavors): tests that use slices use these."""

ASSETS_ENV = "ALLOT_KUBE_ASSETS"
HOW_TO_GET = (
    f"set {ASSETS_ENV} to a folder holding kube-apiserver.xz, kube-controller-manager.xz, kueue.xz and "
    "kueue-v0.13/crds (the workplace's kube-assets; .ci/run sets it) and install Debian's etcd-server"
)
ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "allot-test-admin"
SYNC_TOKEN = "allot-test-sync"
SYNC_USER = "system:serviceaccount:allot-system:allot-sync"
WATCHER_TOKEN = "allot-test-watcher"
WATCHER_USER = "system:serviceaccount:allot-system:allot-usage-watcher"
WEBHOOK_TOKEN = "allot-test-webhook-caller"


def assets_problem() -> str | None:
    """Why the control plane cannot start here (with how to fix it), or None."""
    folder = os.environ.get(ASSETS_ENV, "")
    if not folder:
        return f"{ASSETS_ENV} is not set: {HOW_TO_GET}"
    missing = [
        name
        for name in ("kube-apiserver.xz", "kube-controller-manager.xz", "kueue.xz")
        if not (Path(folder) / name).is_file()
    ]
    if missing:
        return f"{ASSETS_ENV}={folder} lacks {', '.join(missing)}: {HOW_TO_GET}"
    if not crd_dir(Path(folder)):
        return f"{ASSETS_ENV}={folder} has no kueue-v*/crds folder: {HOW_TO_GET}"
    if shutil.which("etcd") is None:
        return f"no etcd on PATH: apt-get install etcd-server ({HOW_TO_GET})"
    return None


def crd_dir(folder: Path) -> Path | None:
    found = sorted(folder.glob("kueue-v*/crds"))
    return found[-1] if found else None


def binary(folder: Path, name: str, cache: Path) -> Path:
    """The decompressed binary, kept in ``cache`` under the archive's size and mtime."""
    archive = folder / f"{name}.xz"
    stat = archive.stat()
    key = hashlib.sha1(f"{archive.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    out = cache / f"{name}-{key}"
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        with lzma.open(archive) as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        partial.chmod(0o755)
        partial.rename(out)
    return out


@dataclass
class Pki:
    """A CA and a serving certificate for 127.0.0.1, written as PEM files."""

    folder: Path
    ca: Path = field(init=False)
    cert: Path = field(init=False)
    key: Path = field(init=False)
    sa_key: Path = field(init=False)

    def __post_init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = dt.datetime.now(dt.UTC)

        def pem_key(key: Any) -> bytes:
            return key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "allot-test-ca")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        self.ca = self.folder / "ca.crt"
        self.cert = self.folder / "tls.crt"
        self.key = self.folder / "tls.key"
        self.sa_key = self.folder / "sa.key"
        self.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.key.write_bytes(pem_key(key))
        self.sa_key.write_bytes(pem_key(rsa.generate_private_key(public_exponent=65537, key_size=2048)))


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + Kueue, started by :meth:`start`."""

    def __init__(self, assets: Path, workdir: Path) -> None:
        self.assets = assets
        self.dir = workdir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kueue_health = free_port()
        self.webhook_port = free_port()
        """Where the tests serve Allot's admission webhooks (:class:`WebhookServer`); the API server presents
        WEBHOOK_TOKEN to it, as production's AdmissionConfiguration does."""

    # --- start and stop ---------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        cache = ROOT / "var" / "kube-bin"
        bins = {n: binary(self.assets, n, cache) for n in ("kube-apiserver", "kube-controller-manager", "kueue")}
        self.pki = Pki(self.dir / "pki")
        self.tokens = self.dir / "tokens.csv"
        self.tokens.write_text(
            f'{ADMIN_TOKEN},admin,1,"system:masters"\n'
            f'{SYNC_TOKEN},{SYNC_USER},2,"system:serviceaccounts,system:serviceaccounts:allot-system"\n'
            f'{WATCHER_TOKEN},{WATCHER_USER},3,"system:serviceaccounts,system:serviceaccounts:allot-system"\n'
        )
        admission = self._admission_config()
        etcd_port, peer = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                "etcd",
                "--name=t",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=t=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(bins["kube-apiserver"]),
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                "--advertise-address=127.0.0.1",
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--tls-cert-file={self.pki.cert}",
                f"--tls-private-key-file={self.pki.key}",
                f"--client-ca-file={self.pki.ca}",
                f"--token-auth-file={self.tokens}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={self.pki.sa_key}",
                f"--service-account-signing-key-file={self.pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.97.0.0/24",
                "--enable-admission-plugins=NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                "--disable-admission-plugins=ServiceAccount",
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                f"--admission-control-config-file={admission}",
            ],
        )
        self._wait("kube-apiserver", lambda: self.get("/readyz", raw=True) == b"ok", 90)
        self.admin_kubeconfig = self.kubeconfig("admin", ADMIN_TOKEN)
        self.sync_kubeconfig = self.kubeconfig("allot-sync", SYNC_TOKEN)
        self.watcher_kubeconfig = self.kubeconfig("allot-usage-watcher", WATCHER_TOKEN)
        crds = crd_dir(self.assets)
        assert crds is not None
        for path in sorted(crds.glob("*.yaml")):
            self.apply_manifest(yaml.safe_load(path.read_text()))
        self._wait("Kueue CRDs", self._crds_established, 60)
        self._spawn(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                f"--kubeconfig={self.admin_kubeconfig}",
                "--controllers=job,garbagecollector",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        self._start_kueue(bins["kueue"])
        return self

    def _admission_config(self) -> Path:
        """The credentials the API server presents to webhooks: a bearer token for 127.0.0.1:webhook_port."""
        users = self.dir / "webhook-credentials.kubeconfig"
        users.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "users": [{"name": f"127.0.0.1:{self.webhook_port}", "user": {"token": WEBHOOK_TOKEN}}],
                }
            )
        )
        plugin = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(users),
        }
        path = self.dir / "admission.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "AdmissionConfiguration",
                    "plugins": [
                        {"name": name, "configuration": plugin}
                        for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
                    ],
                }
            )
        )
        return path

    def _start_kueue(self, kueue: Path) -> None:
        certs = self.dir / "kueue-certs"
        certs.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(self.pki.folder / name, certs / name)
        # this build also reads a fixed metrics certificate path (see the assets' README)
        fixed = Path("/etc/kueue/metrics/certs")
        with contextlib.suppress(OSError):
            fixed.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                if not (fixed / name).exists():
                    shutil.copy(self.pki.folder / name, fixed / name)
        # Allot's own fragment for a v0.13 Kueue (what an operator merges in), plus what runs it on loopback
        sharing = os.environ.get("ALLOT_TEST_KUEUE_SHARING", "fair")
        profiles = [p for spec in SHARED_FLAVORS.values() for p in spec.profiles]
        config = kueue_configuration(sharing, version="v1beta1", profiles=profiles)
        config["integrations"]["frameworks"] = ["batch/job"]
        config["metrics"]["bindAddress"] = f"127.0.0.1:{free_port()}"
        config["featureGates"] = {**config.get("featureGates", {}), "VisibilityOnDemand": False}
        config |= {
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.kueue_health}"},
            "waitForPodsReady": {"enable": False},
        }
        path = self.dir / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kueue", [str(kueue), f"--config={path}"], env={"KUBECONFIG": str(self.admin_kubeconfig)})
        self._wait("kueue", self._kueue_ready, 90)

    def _kueue_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.kueue_health}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            proc = self.processes[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.dir / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=self.dir
        )

    def _wait(self, what: str, ready: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}: {self.log(name)}")
            with contextlib.suppress(Exception):
                if ready():
                    return
            time.sleep(0.3)
        raise RuntimeError(f"{what} not ready after {seconds} s: {self.log(list(self.processes)[-1])}")

    def log(self, name: str, tail: int = 3000) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def _crds_established(self) -> bool:
        found = self.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        kueue = [c for c in found["items"] if c["spec"]["group"] == "kueue.x-k8s.io"]
        return bool(kueue) and all(
            any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions", [])
            )
            for crd in kueue
        )

    # --- access -----------------------------------------------------------------------------------
    def kubeconfig(self, user: str, token: str) -> Path:
        path = self.dir / f"{user}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca)}}
                    ],
                    "users": [{"name": user, "user": {"token": token}}],
                    "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
                    "current-context": user,
                }
            )
        )
        return path

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki.ca))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str = ADMIN_TOKEN,
        content_type: str = "application/json",
        raw: bool = False,
    ) -> Any:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self._ssl(), timeout=30) as response:
            out = response.read()
        return out if raw else json.loads(out or b"{}")

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def apply_manifest(self, obj: dict[str, Any], *, token: str = ADMIN_TOKEN) -> Any:
        """Server-side apply of one object (any kind), as the admin unless ``token`` says otherwise."""
        return self.request(
            "PATCH",
            f"{object_path(obj)}?fieldManager=allot-tests&force=true",
            obj,
            token=token,
            content_type="application/apply-patch+yaml",
        )

    def delete(self, path: str) -> None:
        with contextlib.suppress(urllib.error.HTTPError):
            self.request("DELETE", path, {"propagationPolicy": "Background"})


CORE = {
    "Namespace": "namespaces", "Pod": "pods", "ServiceAccount": "serviceaccounts", "Secret": "secrets",
    "ConfigMap": "configmaps",
}  # fmt: skip
GROUPS = {
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions"),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles"),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
    "Role": ("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    "Job": ("batch/v1", "jobs"),
    "ValidatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"),
    "MutatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"),
    "DaemonSet": ("apps/v1", "daemonsets"),
    "Deployment": ("apps/v1", "deployments"),
}
KUEUE_PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "Workload": "workloads",
}


def object_path(obj: dict[str, Any]) -> str:
    kind, meta = obj["kind"], obj["metadata"]
    ns = meta.get("namespace")
    if kind in CORE:
        base = "/api/v1"
        plural = CORE[kind]
    elif kind in GROUPS:
        base, plural = f"/apis/{GROUPS[kind][0]}", GROUPS[kind][1]
    else:
        base, plural = f"/apis/{obj['apiVersion']}", KUEUE_PLURALS[kind]
    scope = f"/namespaces/{ns}" if ns else ""
    return f"{base}{scope}/{plural}/{meta['name']}"


def start_for_session(tmp_root: Path | None = None) -> ControlPlane:
    folder = Path(os.environ[ASSETS_ENV])
    workdir = Path(tempfile.mkdtemp(prefix="allot-kube-", dir=tmp_root))
    plane = ControlPlane(folder, workdir)
    try:
        return plane.start()
    except BaseException:
        plane.stop()
        raise
