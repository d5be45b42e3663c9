"""Which flavors a pod may land on, by Kueue's own rule — one function for every surface that asks (the
admission webhook's pins, the mutating pin, the waiting explanation).

Kueue's flavor assigner (``pkg/scheduler/flavorassigner``, v0.13 line, the Kueue Allot is tested against)
matches a pod set against each flavor of the ClusterQueue's resource group like this:

* **taints first**: each of the flavor's ``nodeTaints`` whose effect is ``NoSchedule`` or ``NoExecute`` must be
  tolerated by the pod's tolerations or the flavor's own (Kubernetes' toleration rule);
* **then the node affinity, on the group's keys**: the ``nodeSelector`` and every required node-affinity
  expression are kept only where their key is a node-label key that *some flavor of the group* carries
  (all of Allot's flavors are in one resource group); a term left with no expression drops the whole affinity
  (its terms are ORed, so it matches anything); what is kept is matched as kube-scheduler matches a node whose
  labels are the flavor's ``nodeLabels`` — so a flavor **without** a kept key fails ``In``, ``=``, ``Exists``,
  ``Gt`` and ``Lt`` on it, and passes ``NotIn`` and ``DoesNotExist``.

Kueue's main branch later matches each flavor on its own keys only (kubernetes-sigs/kueue#12449); a cluster on
a release with that change admits more than this rule says (a pin on another flavor's key no longer rules a
flavor out), never less."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Requirement = tuple[str, str, tuple[str, ...]]
"""(label key, operator, values) of a node selector requirement."""

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""The taint effects Kueue checks a flavor's ``nodeTaints`` for (``PreferNoSchedule`` never keeps a pod off)."""


@dataclass(frozen=True, slots=True)
class FlavorTaints:
    """A flavor's ``nodeTaints`` and the ``tolerations`` Kueue adds to its pods (both Kubernetes objects)."""

    taints: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()


NO_TAINTS = FlavorTaints()


def node_requirements(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], tuple[tuple[Requirement, ...], ...]]:
    """Where a pod may run, as Kubernetes reads it: the ``nodeSelector`` (each key equal to its value)
    AND, when required node affinity is set, ANY of its ``nodeSelectorTerms`` (a term's match
    expressions all hold). Returns (the selector's requirements, the terms); no terms: no affinity."""
    selector = tuple((str(k), "=", (str(v),)) for k, v in sorted(_mapping(spec.get("nodeSelector")).items()))
    affinity = _mapping(
        _mapping(_mapping(spec.get("affinity")).get("nodeAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    )
    terms = tuple(
        tuple(
            (str(e.get("key", "")), str(e.get("operator", "")), tuple(str(v) for v in _sequence(e.get("values"))))
            for e in _sequence(_mapping(term).get("matchExpressions"))
            if isinstance(e, Mapping)
        )
        for term in _sequence(affinity.get("nodeSelectorTerms"))
    )
    return selector, terms


def kept_requirements(
    spec: Mapping[str, Any], keys: Collection[str]
) -> tuple[tuple[Requirement, ...], tuple[tuple[Requirement, ...], ...]]:
    """The requirements Kueue matches flavors with: the selector's and the affinity's on ``keys`` (the group's
    node-label keys) only; when a term keeps no expression the affinity is dropped whole (no terms)."""
    selector, terms = node_requirements(spec)
    kept_selector = tuple(r for r in selector if r[0] in keys)
    kept_terms = []
    for term in terms:
        kept = tuple(r for r in term if r[0] in keys)
        if not kept:
            return kept_selector, ()
        kept_terms.append(kept)
    return kept_selector, tuple(kept_terms)


def matching_flavors(
    spec: Mapping[str, Any],
    flavors: Mapping[str, Mapping[str, str]],
    taints: Mapping[str, FlavorTaints] | None = None,
) -> tuple[str, ...] | None:
    """The flavors (name → node labels, in the queue's order) a pod template may land on by Kueue's rule (the
    module's docstring); ``taints``: each flavor's taints and tolerations, where it has any. None when every
    flavor may be used ("any flavor"); () when none may — the pod would wait forever."""
    tainted = {n: t for n, t in (taints or {}).items() if t.taints and n in flavors}
    if not spec.get("nodeSelector") and not spec.get("affinity") and not tainted:
        return None  # no requirement at all: the usual template, answered without reading the flavors
    keys = frozenset(k for labels in flavors.values() for k in labels)
    selector, terms = kept_requirements(spec, keys)
    if not selector and not terms and not tainted:
        return None
    tolerations = tuple(t for t in _sequence(spec.get("tolerations")) if isinstance(t, Mapping))
    found = tuple(
        name
        for name, labels in flavors.items()
        if (name not in tainted or tolerated(tainted[name], tolerations))
        and all(holds(labels, req) for req in selector)
        and (not terms or any(all(holds(labels, req) for req in term) for term in terms))
    )
    return None if len(found) == len(flavors) else found


def holds(labels: Mapping[str, str], requirement: Requirement) -> bool:
    """One requirement against a node whose labels are ``labels``, as kube-scheduler matches it: a missing
    key fails ``=``, ``In``, ``Exists``, ``Gt`` and ``Lt`` and passes ``NotIn`` and ``DoesNotExist``; ``Gt`` and
    ``Lt`` compare integers, and a value or label that is not one matches nothing (Kubernetes' error); an
    operator Kubernetes does not know matches nothing."""
    key, op, values = requirement
    present = key in labels
    if op in ("=", "In"):
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1 or not _integer(labels[key]) or not _integer(values[0]):
            return False
        return int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])
    return False


def tolerated(flavor: FlavorTaints, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Every ``NoSchedule``/``NoExecute`` taint of the flavor is tolerated by the pod's tolerations or the
    flavor's own (Kubernetes' ``ToleratesTaint``)."""
    every = (*tolerations, *flavor.tolerations)
    return all(
        any(tolerates(t, taint) for t in every)
        for taint in flavor.taints
        if str(taint.get("effect", "")) in SCHEDULING_EFFECTS
    )


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' ``ToleratesTaint``: the effect matches (an empty one matches every effect), the key matches
    (an empty one matches every key), then ``Exists`` matches any value and ``Equal`` (the default) the same value."""
    effect = str(toleration.get("effect") or "")
    if effect and effect != str(taint.get("effect", "")):
        return False
    key, op = str(toleration.get("key") or ""), str(toleration.get("operator") or "Equal")
    if key and key != str(taint.get("key", "")):
        return False
    if op == "Exists":
        return True
    return op == "Equal" and str(toleration.get("value") or "") == str(taint.get("value") or "")


def _integer(text: str) -> bool:
    digits = text.removeprefix("-")
    return bool(digits) and digits.isascii() and digits.isdigit()


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else ()
