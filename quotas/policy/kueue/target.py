"""The target of a Kueue compile and the words of its objects: the cluster and its flavors, the API version,
Allot's labels and annotations, how a unit path, a tier and a quota are written (``translate`` compiles the
tree with them; the sync, diff, import and coverage read them too)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..quantity import Resource, format_quantity
from ..sharing import EQUIVALENTS, MICRO, WHOLE, FlavorSharing

API_VERSION = "kueue.x-k8s.io/v1beta2"
MANAGED_BY = "allot"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PREFIX = "allot.dev/"
LABEL_CLUSTER = "allot.dev/cluster"
ANNOTATION_UNIT = "allot.dev/unit-path"
ANNOTATION_REVISION = "allot.dev/policy-revision"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
APPLY_ORDER = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")
MAX_NAME = 253

Object = dict[str, Any]


@dataclass(frozen=True, slots=True)
class KueueFlavor:
    key: str
    """``"<cluster>/<flavor>"``, as in the snapshot."""
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    billing_weight: float = 1.0
    order: int = 0
    sharing: FlavorSharing = WHOLE
    """Shared (MIG, MPS, time-slicing): its GPU quota is in GPU-equivalents (``EQUIVALENTS``)."""


@dataclass(frozen=True, slots=True)
class KueueTarget:
    """One Kubernetes cluster: its flavors and the namespaces bound to units on it."""

    cluster: str
    flavors: tuple[KueueFlavor, ...]
    namespaces: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    local_queue_names: Mapping[str, str] = field(default_factory=dict)
    """LocalQueue name per namespace where it was adopted under another name."""
    revision: int = 0
    at: datetime | None = None
    """When the policy is compiled: which budgets are spent now. None: budgets are left out."""
    sharing: str = "classic"
    """How Kueue shares unused quota on this cluster: ``classic``, ``fair`` or ``admission`` (see :mod:`.translate`)."""
    half_life_s: int = 7 * 86400
    """The cluster's fair-share half-life: Kueue's admissionFairSharing.usageHalfLifeTime under ``admission``."""


class CompileError(ValueError):
    """The tree cannot be expressed on this cluster (e.g. a name longer than Kubernetes allows)."""


def kueue_name(path: str) -> str:
    return path.replace("/", ".")


def object_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name): identifies an object on a cluster."""
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def priority_class_name(tier: str) -> str:
    return f"allot-{tier.lower()}"


def amount(name: str, value: int) -> str:
    """A quota of the resource ``name`` as Kueue reads it: GPU-equivalents in their millionths, in the
    canonical form (``1M``, ``2500k``) Kueue's webhook would rewrite anything else into — after which the
    field reads as Kueue's, and the next sync as a conflict."""
    if name == EQUIVALENTS:
        return decimal_si(value * MICRO)
    return format_quantity(Resource(name), value)


def decimal_si(value: int) -> str:
    """An integer as Kubernetes prints a DecimalSI quantity: the largest suffix that leaves a whole number."""
    for suffix, size in (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


def label_value(name: str) -> str:
    """``name`` as a label value (at most 63 characters): a long one keeps its start and a hash of it."""
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[:52].rstrip('-_.')}-{digest}"
