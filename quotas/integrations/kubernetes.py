"""Kueue objects on a cluster, through the official ``kubernetes`` client.

Writes are server-side apply with field manager ``allot`` and ``fieldValidation=Strict``; reads
list only objects labelled ``app.kubernetes.io/managed-by=allot``. The client speaks the newest
``kueue.x-k8s.io`` version the cluster serves (v1beta2, else v1beta1, found by API discovery) and
converts at the edge (quotas.policy.kueue.convert), so callers always see v1beta2 objects. A cluster's
``connection_ref`` says how to reach it:

* ``kubeconfig:/etc/allot/west.yaml`` (optionally ``#context``), a kubeconfig file;
* ``in-cluster``, the pod's service account;
* ``url:http://127.0.0.1:8001``, a plain URL such as ``kubectl proxy`` serves;
* ``demo:<name>``, the demo's simulated cluster (quotas/integrations/demo_cluster.py): syncs only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from quotas.policy.kueue.convert import SUPPORTED, from_version, preferred, to_version

GROUP = "kueue.x-k8s.io"
FIELD_MANAGER = "allot"
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=allot"
PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "MultiKueueCluster": "multikueueclusters",
    "MultiKueueConfig": "multikueueconfigs",
    "AdmissionCheck": "admissionchecks",
}
CRD_NAMES = [
    f"{PLURALS[kind]}.{GROUP}"
    for kind in ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")
]
"""The CRDs every cluster Allot writes to serves (a fleet's manager serves MultiKueue's too)."""
TIMEOUT = (5, 30)  # connect, read seconds
GOVERNED_LABEL = "allot.dev/governed"
"""Set on every namespace bound to a unit: the admission webhooks' namespaceSelector matches it (opt-in)."""
CLUSTER_LABEL = "allot.dev/cluster"
NAMESPACE_MANAGER = "allot-namespaces"


@dataclass
class ClusterCallError(Exception):
    """A call the cluster refused or never answered; carries the server's own words."""

    status: int
    reason: str
    message: str
    causes: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"

    @classmethod
    def from_api(cls, exc: ApiException) -> ClusterCallError:
        try:
            body = json.loads(exc.body or "{}")
        except (TypeError, ValueError):
            body = {}
        return cls(
            status=int(exc.status or 0),
            reason=str(body.get("reason") or exc.reason or ""),
            message=str(body.get("message") or exc.reason or "no message"),
            causes=list((body.get("details") or {}).get("causes") or []),
        )

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "message": self.message, "causes": self.causes}


def api_client_for(connection_ref: str) -> k8s.ApiClient:
    """An ApiClient for a cluster's ``connection_ref``.

    Raises ValueError naming the accepted forms, or what is wrong with the kubeconfig or the
    in-cluster service account."""
    try:
        return _api_client_for(connection_ref)
    except ConfigException as exc:
        raise ValueError(
            f"connection_ref {connection_ref!r}: {exc} — point it at a readable kubeconfig "
            f"(or use 'in-cluster' inside a pod)"
        ) from exc


def _api_client_for(connection_ref: str) -> k8s.ApiClient:
    kind, _, rest = connection_ref.partition(":")
    if connection_ref == "in-cluster":
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
        return k8s.ApiClient(configuration)
    if kind == "kubeconfig" and rest:
        path, _, context = rest.partition("#")
        return k8s_config.new_client_from_config(config_file=path, context=context or None)
    if kind == "url" and rest:
        configuration = k8s.Configuration()
        configuration.host = rest
        return k8s.ApiClient(configuration)
    if kind == "demo":
        raise ValueError(
            f"connection_ref {connection_ref!r} is the demo's simulated cluster: it keeps Kueue objects for a sync "
            "and has no API server to read workloads or namespaces from — use 'kubeconfig:/path[#context]', "
            "'in-cluster' or 'url:http://host:port' for a real one"
        )
    raise ValueError(
        f"connection_ref {connection_ref!r}: use 'kubeconfig:/path[#context]', 'in-cluster' or 'url:http://host:port'"
    )


OWNER_PLURALS = {
    "Job": "jobs",
    "JobSet": "jobsets",
    "PyTorchJob": "pytorchjobs",
    "MPIJob": "mpijobs",
    "TFJob": "tfjobs",
    "LeaderWorkerSet": "leaderworkersets",
    "RayJob": "rayjobs",
    "RayCluster": "rayclusters",
}
"""Resource names of the kinds a Workload's owner can be (Kueue's integrations Allot admits)."""


class KueueClient:
    def __init__(self, api_client: k8s.ApiClient, *, version: str | None = None) -> None:
        self.api_client = api_client
        self.api = k8s.CustomObjectsApi(api_client)
        self._version = version

    def use_version(self, version: str) -> None:
        """Speak ``version`` from now on (the sync's choice from the cluster's own CRDs, which can be
        stricter than discovery: every kind Allot writes must be served in it)."""
        self._version = version

    @property
    def version(self) -> str:
        """The kueue.x-k8s.io version this client speaks: given, or the newest Allot knows that the
        cluster serves (one discovery call, the first time it is needed)."""
        if self._version is None:
            groups = self._call(k8s.ApisApi(self.api_client).get_api_versions)
            served = [
                str(v.get("version"))
                for g in groups.get("groups") or []
                if g.get("name") == GROUP
                for v in g.get("versions") or []
            ]
            found = preferred(served)
            if found is None:
                raise ClusterCallError(
                    404,
                    "NotServed",
                    f"the cluster serves {GROUP} {', '.join(served) or 'in no version'}; Allot speaks "
                    f"{' or '.join(SUPPORTED)}: install Kueue v0.13 or newer",
                )
            self._version = found
        return self._version

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call and parse the JSON body ourselves: the generated client returns None for a 201 from
        a patch (its response map only knows 200), and raw bodies keep the server's exact fields."""
        try:
            response = fn(*args, _request_timeout=TIMEOUT, _preload_content=False, **kwargs)
            return json.loads(response.data or b"{}")
        except ApiException as exc:
            raise ClusterCallError.from_api(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterCallError(0, "Unreachable", f"cannot reach the API server: {exc}") from exc

    def list_managed(self, kind: str) -> list[dict[str, Any]]:
        """Every object of ``kind`` labelled as Allot's, in all namespaces."""
        found = self._call(
            self.api.list_cluster_custom_object, GROUP, self.version, PLURALS[kind], label_selector=MANAGED_SELECTOR
        )
        return [self._in(kind, item) for item in found.get("items", [])]

    def _in(self, kind: str, item: Mapping[str, Any]) -> dict[str, Any]:
        """A listed item (lists may leave out apiVersion and kind) in the v1beta2 form."""
        return from_version({"apiVersion": f"{GROUP}/{self.version}", "kind": kind, **item})

    def list_all(self, kind: str) -> list[dict[str, Any]]:
        """Every object of ``kind``, Allot's or not (for adopting an existing setup)."""
        found = self._call(self.api.list_cluster_custom_object, GROUP, self.version, PLURALS[kind])
        return [self._in(kind, item) for item in found.get("items", [])]

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        try:
            if namespace:
                found = self._call(
                    self.api.get_namespaced_custom_object, GROUP, self.version, namespace, PLURALS[kind], name
                )
            else:
                found = self._call(self.api.get_cluster_custom_object, GROUP, self.version, PLURALS[kind], name)
            return self._in(kind, found)
        except ClusterCallError as exc:
            if exc.status == 404:
                return None
            raise

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
        """Server-side apply; returns the object as the server has (or would have) it."""
        obj = to_version(obj, self.version)
        meta = obj["metadata"]
        options: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "field_validation": "Strict",
            "force": force,
            "_content_type": "application/apply-patch+yaml",
        }
        if dry_run:
            options["dry_run"] = "All"
        plural, version = PLURALS[obj["kind"]], self.version
        if meta.get("namespace"):
            found = self._call(
                self.api.patch_namespaced_custom_object,
                GROUP,
                version,
                meta["namespace"],
                plural,
                meta["name"],
                obj,
                **options,
            )
        else:
            found = self._call(
                self.api.patch_cluster_custom_object, GROUP, version, plural, meta["name"], obj, **options
            )
        return from_version(found)

    def delete(self, kind: str, name: str, namespace: str = "") -> bool:
        """Delete; False when it was already gone."""
        try:
            if namespace:
                self._call(
                    self.api.delete_namespaced_custom_object, GROUP, self.version, namespace, PLURALS[kind], name
                )
            else:
                self._call(self.api.delete_cluster_custom_object, GROUP, self.version, PLURALS[kind], name)
        except ClusterCallError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def governed_namespaces(self, cluster: str) -> set[str]:
        """Namespaces Allot labelled as governed for its cluster ``cluster``."""
        core = k8s.CoreV1Api(self.api_client)
        selector = f"{GOVERNED_LABEL}=true,{CLUSTER_LABEL}={cluster}"
        found = self._call(core.list_namespace, label_selector=selector)
        return {str(ns["metadata"]["name"]) for ns in found.get("items", [])}

    def govern_namespace(self, name: str, cluster: str, *, governed: bool) -> None:
        """Label (or, ``governed=False``, unlabel) a namespace as governed by Allot's cluster ``cluster``:
        server-side apply of the labels alone, under a field manager of their own, so nothing else of the
        namespace is touched and dropping them removes exactly them."""
        labels = {GOVERNED_LABEL: "true", CLUSTER_LABEL: cluster} if governed else {}
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        core = k8s.CoreV1Api(self.api_client)
        self._call(
            core.patch_namespace,
            name,
            body,
            field_manager=NAMESPACE_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    def read_crds(self) -> list[dict[str, Any]]:
        """The cluster's own Kueue CRDs, to validate against exactly what it serves."""
        api = k8s.ApiextensionsV1Api(self.api_client)
        crds = []
        for name in CRD_NAMES:
            crds.append(self._call(api.read_custom_resource_definition, name))
        return crds

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data (Kueue's own configuration lives in one), or None when there is none (404)."""
        try:
            found = self._call(k8s.CoreV1Api(self.api_client).read_namespaced_config_map, name, namespace)
        except ClusterCallError as exc:
            if exc.status == 404:
                return None
            raise
        return {str(k): str(v) for k, v in (found.get("data") or {}).items()}

    def owner_labels(self, namespace: str, ref: Mapping[str, Any]) -> dict[str, str] | None:
        """The labels of the object an ownerReference points at (a Workload's Job, JobSet, RayJob …),
        or None when it is gone (404) or a core-group kind. Read with the generic object path
        ``/apis/<group>/<version>/namespaces/<ns>/<plural>/<name>``."""
        group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
        plural = OWNER_PLURALS.get(str(ref.get("kind") or ""))
        if not group or plural is None:
            return None
        try:
            found = self._call(
                self.api.get_namespaced_custom_object, group, version, namespace, plural, str(ref.get("name"))
            )
        except ClusterCallError as exc:
            if exc.status == 404:
                return None
            raise
        labels = (found.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    def list_core(self, what: str, *, field_selector: str = "", page: int = 500) -> list[dict[str, Any]]:
        """Every ``nodes`` or ``pods`` (all namespaces) object, read in pages, as raw JSON."""
        core = k8s.CoreV1Api(self.api_client)
        fn = core.list_node if what == "nodes" else core.list_pod_for_all_namespaces
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            options: dict[str, Any] = {"limit": page}
            if token:
                options["_continue"] = token
            if field_selector:
                options["field_selector"] = field_selector
            found = self._call(fn, **options)
            items += found.get("items", [])
            token = (found.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    def list_workloads(self, *, page: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every Workload in every namespace, read in pages, and the list's resourceVersion: the
        point a watch resumes from. A continue token that expired mid-list (410) starts the list again."""
        return self.list_pages("workloads", page=page)

    def list_pages(self, plural: str, *, page: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every object of a Kueue kind (``workloads``, ``clusterqueues``), read in pages, and the list's
        resourceVersion (see :meth:`list_workloads`)."""
        for _attempt in range(3):
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    options: dict[str, Any] = {"limit": page}
                    if token:
                        options["_continue"] = token
                    found = self._call(self.api.list_cluster_custom_object, GROUP, self.version, plural, **options)
                    items += found.get("items", [])
                    meta = found.get("metadata") or {}
                    token = meta.get("continue") or None
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except ClusterCallError as exc:
                if exc.status != 410 or not token:
                    raise
        raise ClusterCallError(410, "Expired", f"the {plural} list kept expiring between pages; try a larger page")

    def watch_workloads(self, resource_version: str, *, timeout_seconds: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Workload events (ADDED, MODIFIED, DELETED, BOOKMARK) after ``resource_version``, until the
        server ends the watch (``timeout_seconds``) or the connection drops. A resourceVersion the
        server no longer keeps raises ClusterCallError 410: list again and watch from the list's."""
        return self.watch("workloads", resource_version, timeout_seconds=timeout_seconds)

    def watch(
        self, plural: str, resource_version: str, *, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events of a Kueue kind after ``resource_version`` (see :meth:`watch_workloads`)."""
        version = self.version
        stream = k8s_watch.Watch().stream(
            self.api.list_cluster_custom_object,
            GROUP,
            version,
            plural,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            _request_timeout=(TIMEOUT[0], timeout_seconds + 30),
        )
        try:
            for event in stream:
                yield str(event["type"]), dict(event["raw_object"])
        except ApiException as exc:
            raise ClusterCallError.from_api(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterCallError(0, "Dropped", f"the watch connection dropped: {exc}") from exc
