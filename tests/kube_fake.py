"""A small stateful stand-in for a kube-apiserver with the Kueue CRDs, on loopback.

No API server can run on these machines, so end-to-end sync tests talk to this one through the
official client. It behaves as the captured exchanges in ``tests/fixtures/k8s-api`` show:
201 on create and 200 on a no-op apply (same resourceVersion), server defaults added to
ClusterQueues and LocalQueues, dry runs that store nothing, 409 after an out-of-band edit unless
``force=true``, 422 with causes for objects the real CRD schema and CEL rules refuse (rendered the
way the real server renders them), 404 for missing namespaces and objects, 401 without the token.
Every request is logged, so tests can count writes.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlparse

from quotas.integrations.kubernetes import PLURALS
from quotas.policy.kueue.schema import CrdSchemas

KINDS = {plural: kind for kind, plural in PLURALS.items()}
PREFIX = "/apis/kueue.x-k8s.io/v1beta2"
CRD_PREFIX = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
DEFAULTS: dict[str, dict[str, Any]] = {
    "ClusterQueue": {
        "stopPolicy": "None",
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
    },
    "LocalQueue": {"stopPolicy": "None"},
}


def bundled_crds() -> list[dict[str, Any]]:
    """The Kueue CRDs Allot bundles (v0.20), as a cluster running that Kueue serves them."""
    import yaml

    from quotas.kueue_crds import CRD_DIR

    return [yaml.safe_load(f.read_text()) for f in sorted(CRD_DIR.glob("kueue.x-k8s.io_*.yaml"))]


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class FakeKueueServer:
    def __init__(
        self,
        schemas: CrdSchemas,
        *,
        namespaces: set[str] | None = None,
        token: str | None = None,
        crds: list[dict[str, Any]] | None = None,
    ):
        self.schemas = schemas
        self.crds = {c["metadata"]["name"]: c for c in (crds if crds is not None else bundled_crds())}
        """The CustomResourceDefinitions it serves (apiextensions.k8s.io/v1): Kueue's, by default the bundled
        ones; a test gives an older Kueue's to see what Allot does with it."""
        self.namespaces = namespaces
        self.namespace_labels: dict[str, dict[str, str]] = {}
        """Labels Allot applied to each namespace (the fake keeps only one field manager's)."""
        self.requests_by_manager: dict[str, list[str]] = {}
        self.token = token
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.core: dict[str, list[dict[str, Any]]] = {"nodes": [], "pods": []}
        """Nodes and Pods the core API lists (tests put them here)."""
        self.requests: list[tuple[str, str]] = []
        self.version = 700
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with fake.lock:
                    code, payload = fake.handle(self.command, self.path, body, self.headers.get("Authorization"))
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_DELETE = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- what tests look at and do out of band ------------------------------------------------------
    def writes(self) -> list[tuple[str, str]]:
        """Writes of Kueue objects (namespace labels are counted apart: ``namespace_writes``)."""
        return [
            (m, p)
            for m, p in self.requests
            if m in ("PATCH", "DELETE") and "dryRun=All" not in p and not p.startswith("/api/v1/namespaces")
        ]

    def namespace_writes(self) -> list[str]:
        return [p for m, p in self.requests if m == "PATCH" and p.startswith("/api/v1/namespaces")]

    def kubectl_edit(
        self, kind: str, name: str, change: Any, namespace: str = "", manager: str = "kubectl-edit"
    ) -> None:
        """Change an object as `kubectl edit` (or another controller, ``manager``) would: that field
        manager takes the quota."""
        obj = self.objects[(kind, namespace, name)]
        change(obj)
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        obj["metadata"]["generation"] += 1
        obj["metadata"]["managedFields"].append(
            {"manager": manager, "operation": "Update", "fieldsV1": {"f:spec": {"f:resourceGroups": {}}}}
        )

    def put_unmanaged(self, obj: dict[str, Any]) -> None:
        """An object someone else created (no managed-by label)."""
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = self._stored(obj, "helm")

    # --- the API ---------------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, body: Any, auth: str | None) -> tuple[int, Any]:
        self.requests.append((method, raw_path))
        if self.token and auth != f"Bearer {self.token}":
            return 401, status(401, "Unauthorized", "Unauthorized")
        url = urlparse(raw_path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path.rstrip("/") == "/apis" and method == "GET":
            return 200, self._discovery()
        if url.path.startswith("/api/v1/namespaces") and url.path.count("/") <= 4:
            return self._namespace(method, url.path, body, query)
        if url.path in ("/api/v1/nodes", "/api/v1/pods") and method == "GET":
            return 200, self._core_list(url.path.rsplit("/", 1)[-1], query)
        if url.path.startswith(CRD_PREFIX) and method == "GET":
            name = url.path.removeprefix(CRD_PREFIX).strip("/")
            found = self.crds.get(name)
            if found is None:
                message = f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found'
                return 404, status(404, "NotFound", message, name=name, kind="customresourcedefinitions")
            return 200, found
        parts = url.path.removeprefix(PREFIX).strip("/").split("/")
        namespace = ""
        if parts[0] == "namespaces":
            namespace, parts = parts[1], parts[2:]
        kind = KINDS.get(parts[0])
        if kind is None:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        if len(parts) == 1 and method == "GET":
            return 200, self._list(kind, query.get("labelSelector", ""))
        name = parts[1]
        key = (kind, namespace, name)
        if method == "GET":
            found = self.objects.get(key)
            return (200, found) if found else (404, self._not_found(parts[0], name))
        if method == "DELETE":
            if key not in self.objects:
                return 404, self._not_found(parts[0], name)
            self.version += 1
            return 200, self.objects.pop(key)
        return self._apply(kind, key, body, query)

    def _namespace(self, method: str, path: str, body: Any, query: dict[str, str]) -> tuple[int, Any]:
        """Namespaces: listed with a label selector (``a=b,c=d``) and their labels server-side applied by a field
        manager (what it applied before and not now is removed). Any namespace exists unless ``namespaces`` says
        which do."""
        name = path.removeprefix("/api/v1/namespaces").strip("/")
        if method == "GET" and not name:
            wanted = dict(term.split("=", 1) for term in filter(None, query.get("labelSelector", "").split(",")))
            items = [
                {"metadata": {"name": n, "labels": labels}}
                for n, labels in sorted(self.namespace_labels.items())
                if all(labels.get(k) == v for k, v in wanted.items())
            ]
            return 200, {"kind": "NamespaceList", "apiVersion": "v1", "items": items}
        if self.namespaces is not None and name not in self.namespaces:
            return 404, status(404, "NotFound", f'namespaces "{name}" not found', name=name, kind="namespaces")
        if method == "PATCH":
            self.requests_by_manager.setdefault(query.get("fieldManager", ""), []).append(name)
            self.namespace_labels[name] = dict((body.get("metadata") or {}).get("labels") or {})
            return 200, {"metadata": {"name": name, "labels": self.namespace_labels[name]}}
        return 200, {"metadata": {"name": name, "labels": self.namespace_labels.get(name, {})}}

    def _discovery(self) -> dict[str, Any]:
        """``GET /apis``: the kueue.x-k8s.io versions its CRDs serve, newest first (as the server orders them)."""
        served = sorted(
            {v["name"] for crd in self.crds.values() for v in crd["spec"]["versions"] if v.get("served")}, reverse=True
        )
        versions = [{"groupVersion": f"kueue.x-k8s.io/{v}", "version": v} for v in served]
        groups = [{"name": "kueue.x-k8s.io", "versions": versions, "preferredVersion": versions[0]}] if versions else []
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _core_list(self, what: str, query: dict[str, str]) -> dict[str, Any]:
        """A NodeList or PodList as the API server pages it (``limit``, ``continue``), honouring a
        ``status.phase!=…`` field selector the way the server does."""
        items = list(self.core.get(what, []))
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            path, _, value = term.partition("!=")
            if path == "status.phase":
                items = [i for i in items if (i.get("status") or {}).get("phase") != value]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items)
        page, rest = items[start : start + limit], start + limit < len(items)
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if rest:
            meta["continue"] = str(start + limit)
        kind = {"nodes": "NodeList", "pods": "PodList"}[what]
        return {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": page}

    def _list(self, kind: str, selector: str) -> dict[str, Any]:
        label, _, value = selector.partition("=")
        items = [
            o
            for (k, _, _), o in sorted(self.objects.items())
            if k == kind and (not label or o["metadata"].get("labels", {}).get(label) == value)
        ]
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "items": items,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(self.version)},
        }

    @staticmethod
    def _not_found(plural: str, name: str) -> dict[str, Any]:
        return status(
            404,
            "NotFound",
            f'{plural}.kueue.x-k8s.io "{name}" not found',
            name=name,
            group="kueue.x-k8s.io",
            kind=plural,
        )

    def _apply(self, kind: str, key: tuple[str, str, str], body: Any, query: dict[str, str]) -> tuple[int, Any]:
        _, namespace, name = key
        if namespace and self.namespaces is not None and namespace not in self.namespaces:
            return 404, status(
                404, "NotFound", f'namespaces "{namespace}" not found', name=namespace, kind="namespaces"
            )
        problems = self.schemas.validate(body, self.objects.get(key))
        if problems:
            causes = [{"reason": "FieldValueInvalid", "message": p.message, "field": p.field} for p in problems]
            text = ", ".join(f"{p.field}: {p.message}" for p in problems)
            return 422, status(
                422,
                "Invalid",
                f'{kind}.kueue.x-k8s.io "{name}" is invalid: {text}',
                name=name,
                group="kueue.x-k8s.io",
                kind=kind,
                causes=causes,
            )
        current = self.objects.get(key)
        force = query.get("force") == "true"
        if (
            current is not None
            and not force
            and any(
                m["manager"] != "allot" and m["operation"] == "Update" for m in current["metadata"]["managedFields"]
            )
            and current.get("spec") != {**DEFAULTS.get(kind, {}), **body.get("spec", {})}
        ):
            return 409, status(
                409,
                "Conflict",
                'Apply failed with 1 conflict: conflict with "kubectl-edit" using '
                "kueue.x-k8s.io/v1beta2: .spec.resourceGroups",
                causes=[
                    {
                        "reason": "FieldManagerConflict",
                        "field": ".spec.resourceGroups",
                        "message": 'conflict with "kubectl-edit" using kueue.x-k8s.io/v1beta2',
                    }
                ],
            )
        new = self._stored(body, "allot", current)
        if current is not None and _same(current, new):
            return 200, current
        if query.get("dryRun") == "All":
            return 200, new
        self.version += 1
        new["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = new
        return (201 if current is None else 200), new

    def _stored(self, body: dict[str, Any], manager: str, current: dict[str, Any] | None = None) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        if "spec" in obj:  # a server default fills a field only where the object leaves it out
            obj["spec"] = {**DEFAULTS.get(obj["kind"], {}), **obj["spec"]}
        meta = obj["metadata"]
        old = current["metadata"] if current else {}
        meta["uid"] = old.get("uid", str(uuid.uuid4()))
        meta["resourceVersion"] = old.get("resourceVersion", str(self.version))
        meta["creationTimestamp"] = old.get("creationTimestamp", "2026-11-29T20:10:33Z")
        changed = current is None or current.get("spec") != obj.get("spec")
        meta["generation"] = old.get("generation", 0) + (1 if changed else 0)
        meta["managedFields"] = [
            {
                "manager": manager,
                "operation": "Apply" if manager == "allot" else "Update",
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {f"f:{k}": {} for k in body.get("spec", {})}},
            }
        ]
        return obj


def _same(current: dict[str, Any], new: dict[str, Any]) -> bool:
    def view(o: dict[str, Any]) -> Any:
        m = o["metadata"]
        return (o.get("spec"), o.get("value"), o.get("description"), m.get("labels"), m.get("annotations"))

    return bool(view(current) == view(new))


class StallingServer(FakeKueueServer):
    """Holds the real (not dry-run) PATCH that follows ``after`` earlier writes until ``gate`` is set;
    ``reached`` says one got there. The process syncing meanwhile holds its locks: a test kills it."""

    def __init__(self, schemas: CrdSchemas, *, after: int = 0, **options: Any) -> None:
        super().__init__(schemas, **options)
        self.after, self.reached, self.gate = after, threading.Event(), threading.Event()

    def handle(self, method: str, raw_path: str, body: Any, auth: str | None) -> tuple[int, Any]:
        real = method == "PATCH" and "dryRun=All" not in raw_path
        if real and not self.reached.is_set() and len(self.writes()) == self.after:
            self.reached.set()
            self.gate.wait(60)
        return super().handle(method, raw_path, body, auth)
