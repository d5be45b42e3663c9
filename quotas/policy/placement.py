"""Where a pod may land, as Kubernetes reads its template: the node selector AND any term of its required
node affinity, matched against each flavor's node labels. Shared by the admission webhook (which refuses a
pin no flavor satisfies) and the waiting explanation (which names the flavors a pending workload may use)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

Requirement = tuple[str, str, tuple[str, ...]]
"""(label key, operator, values) of a node selector requirement."""


def node_requirements(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], tuple[tuple[Requirement, ...], ...]]:
    """Where a pod may run, as Kubernetes reads it: the ``nodeSelector`` (each key equal to its value)
    AND, when required node affinity is set, ANY of its ``nodeSelectorTerms`` (a term's match
    expressions all hold). Returns (the selector's requirements, the terms); no terms: no affinity."""
    selector = tuple((str(k), "In", (str(v),)) for k, v in sorted((spec.get("nodeSelector") or {}).items()))
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = tuple(
        tuple(
            (str(e.get("key", "")), str(e.get("operator", "")), tuple(str(v) for v in e.get("values") or ()))
            for e in term.get("matchExpressions") or []
        )
        for term in affinity.get("nodeSelectorTerms") or []
    )
    return selector, terms


def matching_flavors(spec: Mapping[str, Any], flavors: Mapping[str, Mapping[str, str]]) -> tuple[str, ...] | None:
    """The flavors (name → node labels) a pod template may land on given its node selector AND its
    required node affinity (any of its terms); None when no requirement names a flavor label (any flavor);
    () when no flavor satisfies them. Requirements on labels no flavor uses are left to the scheduler; a
    flavor that lacks a flavor label another flavor uses is not ruled out by it. Requirements every flavor
    satisfies pin nothing: None, "any flavor"."""
    if not spec.get("nodeSelector") and not spec.get("affinity"):
        return None  # no requirement at all: the usual template, answered without reading the flavors
    keys = frozenset(k for labels in flavors.values() for k in labels)
    selector, terms = node_requirements(spec)
    if not any(k in keys for k, _, _ in selector) and not any(k in keys for term in terms for k, _, _ in term):
        return None
    found = tuple(
        name
        for name, labels in flavors.items()
        if all(holds(labels, req, keys) for req in selector)
        and (not terms or any(all(holds(labels, req, keys) for req in term) for term in terms))
    )
    return None if found and len(found) == len(flavors) else found


def holds(labels: Mapping[str, str], requirement: Requirement, keys: Collection[str]) -> bool:
    """One requirement against a flavor's node labels (``keys``: every flavor label of the cluster)."""
    key, op, values = requirement
    if key not in keys or key not in labels:
        return True  # not a flavor label, or not one this flavor's nodes are known by
    value = labels[key]
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in ("Gt", "Lt"):
        # Kubernetes compares both as integers; a node label that is not one matches neither (issue #40.4)
        if len(values) == 1 and _integer(value) and _integer(values[0]):
            return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
        return False
    return True


def _integer(text: str) -> bool:
    return text.removeprefix("-").isascii() and text.removeprefix("-").isdigit()
