"""The demo's Kubernetes cluster: no API server, its Kueue objects kept in a file.

A cluster whose ``connection_ref`` is ``demo:<name>`` is simulated: a sync, a dry run and a drift check
run Allot's real code (compile, validate against the bundled CRDs, plan, dry-run, apply, report) against
this store, ``ALLOT_VAR_DIR/demo-clusters/<name>.json``, which answers the calls a sync makes the way an
API server with Kueue's CRDs does: it serves the bundled CRDs (so the version Allot speaks is theirs),
lists by Allot's label, stores what is applied (nothing on a dry run), deletes, and refuses a non-forced
apply with 409 when a field Allot applies was edited by someone else (``person_edit``, what a
``kubectl edit`` does), naming that field manager as the real server does. It adds no server defaults
and runs no scheduler: it exists so ``./dev run`` shows what a sync, a dry run and a drift check look
like without a cluster. The file is locked for each call, so the web process and a worker may share it.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from quotas.integrations.kubernetes import (
    CLUSTER_LABEL,
    CRD_NAMES,
    FIELD_MANAGER,
    GOVERNED_LABEL,
    GROUP,
    PLURALS,
    ClusterCallError,
    KueueClient,
    api_client_for,
)
from quotas.kueue_crds import CRD_DIR
from quotas.policy.kueue.target import LABEL_MANAGED_BY

PREFIX = "demo:"
EDITOR = "kubectl-edit"

State = dict[str, Any]


def is_demo(connection_ref: str) -> bool:
    return connection_ref.startswith(PREFIX)


def store_path(name: str) -> Path:
    return Path(settings.VAR_DIR) / "demo-clusters" / f"{name}.json"


@contextmanager
def _state(name: str, *, write: bool) -> Iterator[State]:
    """The store's state under an exclusive lock; written back (atomically) when ``write``."""
    path = store_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state: State = json.loads(path.read_text()) if path.exists() else {}
        state.setdefault("objects", {})
        state.setdefault("namespaces", {})
        yield state
        if write:
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(state, sort_keys=True))
            os.replace(temporary, path)


def reset(name: str) -> None:
    """Empty the simulated cluster (the demo is loaded afresh)."""
    with _state(name, write=True) as state:
        state["objects"], state["namespaces"] = {}, {}


def _key(kind: str, name: str, namespace: str) -> str:
    return f"{kind}/{namespace}/{name}"


def _public(stored: Mapping[str, Any]) -> dict[str, Any]:
    """An object as the server shows it: without the store's own bookkeeping."""
    obj = copy.deepcopy(dict(stored))
    obj.pop("_applied", None)
    return obj


def person_edit(
    cluster: str, kind: str, name: str, change: Callable[[dict[str, Any]], str], namespace: str = ""
) -> str:
    """Change an object as a person's ``kubectl edit`` would: ``change`` edits its spec in place and
    returns the field it changed (``.spec.…``), which from now on is the editor's. Returns that field."""
    with _state(cluster, write=True) as state:
        stored = state["objects"].get(_key(kind, name, namespace))
        if stored is None:
            raise KeyError(f"{kind} {name} is not on the demo cluster {cluster}")
        field = change(stored["spec"])
        meta = stored["metadata"]
        meta["managedFields"] = [m for m in meta.get("managedFields", []) if m.get("manager") != EDITOR]
        meta["managedFields"].append({"manager": EDITOR, "operation": "Update", "fields": [field]})
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
        return field


class DemoKueueClient(KueueClient):
    """The calls of :class:`KueueClient` a sync makes, answered by the store (see the module)."""

    def __init__(self, connection_ref: str) -> None:
        self.cluster = connection_ref.removeprefix(PREFIX) or "demo"
        self._version = "v1beta2"

    def list_managed(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.list_all(kind) if (o["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == "allot"]

    def list_all(self, kind: str) -> list[dict[str, Any]]:
        with _state(self.cluster, write=False) as state:
            return [_public(o) for o in state["objects"].values() if o["kind"] == kind]

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with _state(self.cluster, write=False) as state:
            stored = state["objects"].get(_key(kind, name, namespace))
            return None if stored is None else _public(stored)

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
        kind, meta = str(obj.get("kind")), obj["metadata"]
        if kind not in PLURALS:
            raise ClusterCallError(404, "NotFound", f"the server could not find the requested resource ({kind})")
        key = _key(kind, meta["name"], meta.get("namespace", ""))
        with _state(self.cluster, write=not dry_run) as state:
            stored = state["objects"].get(key)
            edited = [
                (m["manager"], field)
                for m in (stored or {}).get("metadata", {}).get("managedFields", [])
                if m.get("manager") != FIELD_MANAGER
                for field in m.get("fields", [])
            ]
            if stored is not None and edited and not force and obj.get("spec") != stored.get("spec"):
                manager, field = edited[0]
                raise ClusterCallError(
                    409,
                    "Conflict",
                    f'Apply failed with 1 conflict: conflict with "{manager}" using {GROUP}/{self._version}: {field}',
                    causes=[{"type": "FieldManagerConflict", "message": f'conflict with "{manager}"', "field": field}],
                )
            version = int((stored or {}).get("metadata", {}).get("resourceVersion", "0"))
            new = copy.deepcopy(dict(obj))
            new["apiVersion"] = f"{GROUP}/{self._version}"
            new["metadata"] = {
                **copy.deepcopy(dict(meta)),
                "resourceVersion": str(version + (0 if stored and stored.get("spec") == obj.get("spec") else 1)),
                "managedFields": [{"manager": FIELD_MANAGER, "operation": "Apply"}],
            }
            if not dry_run:
                state["objects"][key] = new
            return _public(new)

    def delete(self, kind: str, name: str, namespace: str = "") -> bool:
        with _state(self.cluster, write=True) as state:
            return state["objects"].pop(_key(kind, name, namespace), None) is not None

    def governed_namespaces(self, cluster: str) -> set[str]:
        with _state(self.cluster, write=False) as state:
            return {
                name
                for name, labels in state["namespaces"].items()
                if labels.get(GOVERNED_LABEL) == "true" and labels.get(CLUSTER_LABEL) == cluster
            }

    def govern_namespace(self, name: str, cluster: str, *, governed: bool) -> None:
        """Every namespace a unit is bound to exists on the demo cluster."""
        with _state(self.cluster, write=True) as state:
            state["namespaces"][name] = {GOVERNED_LABEL: "true", CLUSTER_LABEL: cluster} if governed else {}

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return None  # the simulated cluster runs no Kueue of its own: nothing configured

    def read_crds(self) -> list[dict[str, Any]]:
        """The bundled CRDs (quotas/kueue_crds): the demo cluster runs the Kueue Allot is built against."""
        return [yaml.safe_load((CRD_DIR / f"{GROUP}_{name.split('.')[0]}.yaml").read_text()) for name in CRD_NAMES]


def kueue_client_for(connection_ref: str) -> KueueClient:
    """The client for a cluster's ``connection_ref``: the demo's store for ``demo:<name>``, else the API
    server it names (ValueError naming the accepted forms when it names none)."""
    if is_demo(connection_ref):
        return DemoKueueClient(connection_ref)
    return KueueClient(api_client_for(connection_ref))
