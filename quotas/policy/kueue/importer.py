"""Existing Kueue objects → an Allot tree (the inverse of :mod:`.translate`), so a site can adopt
Allot without retyping its quotas.

* The Cohort tree becomes units: a root Cohort (or an implicit one: a name CQs point to with no
  object) is an organisation, its children departments, deeper Cohorts teams (or projects under a
  team); a ClusterQueue is a team under an organisation or department, a project under a team.
* Guarantees: a ClusterQueue's ``nominalQuota``; a Cohort's is its own ``nominalQuota`` (capacity it
  adds) plus its children's guarantees. ``borrowingLimit`` → burst; absent means unlimited, imported
  as "up to the parent's ceiling". ``lendingLimit`` → lendable; absent means all of the guarantee.
* A ClusterQueue named like its Cohort is that unit's own queue (how Allot compiles a team whose
  projects have caps): its namespaces go to the unit, and its nominal quota (the unit's residual guarantee,
  as Allot compiles it; 0 as Allot compiled it before) adds to the unit's guarantee like the Cohort's own.
* LocalQueues bind their namespace to the unit of their ClusterQueue.
* Names that are not Allot's dotted paths are kept (``kueue_name``, ``local_queue``) so that
  compiling the imported tree gives the same objects back.
* ``WorkloadPriorityClass`` named ``allot-pN`` become tiers ``PN``; preemption settings become
  contracts ``imported-<reclaim>-<within>`` (with default times to review).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any

from ..quantity import Resource, parse_decimal_quantity
from ..sharing import EQUIVALENTS, MICRO
from ..snapshot import UnitKind

_SLUG = re.compile(r"[^a-z0-9-]+")
_TIER = re.compile(r"^allot-p([0-9])$")


@dataclass
class ImportedUnit:
    key: str
    """The Kueue name it came from (cohort or queue)."""
    kind: UnitKind
    parent: str | None
    slug: str
    weight: str = "1"
    kueue_name: str = ""
    contract: str | None = None
    quotas: dict[tuple[str, Resource], list[int]] = field(default_factory=dict)
    """(flavor, resource) → [guarantee, burst or -1 for unlimited, lendable or -1 for all]."""
    namespaces: dict[str, str] = field(default_factory=dict)
    """namespace → LocalQueue name ("" when it is the derived one)."""


@dataclass
class ImportPlan:
    units: dict[str, ImportedUnit] = field(default_factory=dict)
    flavors: dict[str, dict[str, Any]] = field(default_factory=dict)
    tiers: dict[str, tuple[int, str]] = field(default_factory=dict)
    contracts: dict[str, tuple[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    """Settings the import cannot carry over, which would change what gets admitted: an operator
    accepts them before importing (they are in ``notes`` too)."""

    def top_down(self) -> list[ImportedUnit]:
        order: list[ImportedUnit] = []
        pending = sorted((u for u in self.units.values() if u.parent is None), key=lambda u: u.key)
        while pending:
            unit = pending.pop(0)
            order.append(unit)
            pending += sorted((u for u in self.units.values() if u.parent == unit.key), key=lambda u: u.key)
        return order

    def path(self, key: str) -> str:
        unit = self.units[key]
        return unit.slug if unit.parent is None else f"{self.path(unit.parent)}/{unit.slug}"


def read_kueue(objects: Iterable[Mapping[str, Any]]) -> ImportPlan:
    plan = ImportPlan()
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for obj in objects:
        if obj.get("apiVersion", "").startswith("kueue.x-k8s.io/"):
            by_kind.setdefault(obj.get("kind", ""), []).append(obj)
    for flavor in by_kind.get("ResourceFlavor", []):
        spec = flavor.get("spec") or {}
        plan.flavors[flavor["metadata"]["name"]] = {
            "node_labels": dict(spec.get("nodeLabels") or {}),
            "tolerations": list(spec.get("tolerations") or []),
        }
        if spec.get("nodeTaints") or spec.get("topologyName"):
            lost = [k for k in ("nodeTaints", "topologyName") if spec.get(k)]
            _loss(
                plan,
                f"ResourceFlavor {flavor['metadata']['name']}: {' and '.join(lost)} not imported (Allot's flavors "
                f"carry node labels and tolerations only); the next sync removes them — re-create them on the "
                f"nodes' taints, or keep this flavor out of Allot",
            )
    cohorts = {c["metadata"]["name"]: c for c in by_kind.get("Cohort", [])}
    queues = {q["metadata"]["name"]: q for q in by_kind.get("ClusterQueue", [])}
    _flavor_order(plan, [*queues.values(), *cohorts.values()])
    _cohort_units(plan, cohorts, queues)
    _queue_units(plan, cohorts, queues)
    _namespaces(plan, by_kind.get("LocalQueue", []), queues, cohorts)
    _cohort_guarantees(plan)
    _meaning_notes(plan, queues, by_kind.get("LocalQueue", []))
    for wpc in by_kind.get("WorkloadPriorityClass", []):
        match = _TIER.match(wpc["metadata"]["name"])
        if match:
            plan.tiers[f"P{match[1]}"] = (int(wpc.get("value", 0)), str(wpc.get("description") or ""))
            _loss(
                plan,
                f"WorkloadPriorityClass {wpc['metadata']['name']}: imported as tier P{match[1]} with its value only; "
                f"a tier's runtime limit, its opportunistic flag (checkpoints required) and who may use it are not "
                f"in Kueue — set them on the tier and the units before admission relies on them",
            )
        else:
            plan.notes.append(
                f"WorkloadPriorityClass {wpc['metadata']['name']} not imported: Allot's tiers are "
                f"P0–P9 (create the tier, then map your workloads to allot-pN)"
            )
    return plan


def _loss(plan: ImportPlan, text: str) -> None:
    plan.notes.append(text)
    plan.losses.append(text)


def _meaning_notes(plan: ImportPlan, queues: Mapping[str, Any], local_queues: Iterable[Mapping[str, Any]]) -> None:
    """Every setting the import cannot carry into Allot's model, per object (issue #15.7): never a
    silent change of meaning. The operator reads them before applying (``--accept-notes``)."""
    namespaces: dict[str, set[str]] = {}
    for lq in local_queues:
        queue = (lq.get("spec") or {}).get("clusterQueue")
        namespaces.setdefault(str(queue), set()).add(str((lq.get("metadata") or {}).get("namespace")))
    for name in sorted(queues):
        spec = queues[name].get("spec") or {}
        strategy = spec.get("queueingStrategy", "BestEffortFIFO")
        if strategy != "BestEffortFIFO":
            _loss(
                plan,
                f"ClusterQueue {name}: queueingStrategy {strategy} becomes BestEffortFIFO (Allot's queues let a "
                f"workload that fits go ahead of one that does not)",
            )
        selector = spec.get("namespaceSelector")
        labels = selector.get("matchLabels") if isinstance(selector, dict) else None
        own = namespaces.get(name, set())
        exact = labels == {"kubernetes.io/metadata.name": next(iter(own))} if len(own) == 1 else False
        if selector == {} or (labels and not exact):
            what = "{} (every namespace)" if selector == {} else f"matchLabels {labels}"
            _loss(
                plan,
                f"ClusterQueue {name}: namespaceSelector {what} becomes the namespaces of its LocalQueues "
                f"({', '.join(sorted(own)) or 'none'}): a namespace that only matched the selector loses the queue",
            )
        if spec.get("cohortName"):
            for group in spec.get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for entry in flavor.get("resources") or []:
                        if "borrowingLimit" not in entry:
                            _loss(
                                plan,
                                f"ClusterQueue {name}: {flavor.get('name')}/{entry.get('name')} may borrow without "
                                f"limit in Kueue; in Allot borrowing is bounded by the burst of every unit above",
                            )


def _flavor_order(plan: ImportPlan, objects: list[Mapping[str, Any]]) -> None:
    """Kueue tries a queue's flavors in order: keep the order the queues list them in."""
    order: list[str] = []
    for obj in sorted(objects, key=lambda o: o["metadata"]["name"]):
        for group in (obj.get("spec") or {}).get("resourceGroups") or []:
            names = [f["name"] for f in group.get("flavors") or []]
            for i, name in enumerate(names):
                if name not in order:
                    later = [n for n in names[i + 1 :] if n in order]
                    order.insert(order.index(later[0]) if later else len(order), name)
    for position, name in enumerate(order):
        if name in plan.flavors:
            plan.flavors[name]["queue_order"] = position


def _slug(name: str, parent: str | None) -> str:
    if parent and name.startswith(f"{parent}."):
        name = name[len(parent) + 1 :]
    return _SLUG.sub("-", name.lower()).strip("-")[:63] or "unit"


def _cohort_units(plan: ImportPlan, cohorts: Mapping[str, Any], queues: Mapping[str, Any]) -> None:
    parents: dict[str, str | None] = {n: (c.get("spec") or {}).get("parentName") for n, c in cohorts.items()}
    for queue in queues.values():
        name = (queue.get("spec") or {}).get("cohortName")
        if name and name not in parents:
            parents[name] = None
            plan.notes.append(f"cohort {name} has no Cohort object (implicit): imported as an organisation")
    for parent in list(parents.values()):
        if parent and parent not in parents:
            parents[parent] = None
            plan.notes.append(f"cohort {parent} has no Cohort object (implicit): imported as an organisation")

    def depth(name: str) -> int:
        parent = parents.get(name)
        return 0 if parent is None else 1 + depth(parent)

    for name in sorted(parents, key=lambda n: (depth(n), n)):
        parent = parents[name]
        if parent is None:
            kind = UnitKind.ORGANISATION
        elif depth(name) == 1:
            kind = UnitKind.DEPARTMENT
        else:
            parent_kind = plan.units[parent].kind
            kind = UnitKind.TEAM if parent_kind in (UnitKind.ORGANISATION, UnitKind.DEPARTMENT) else UnitKind.PROJECT
        spec = (cohorts.get(name) or {}).get("spec") or {}
        unit = ImportedUnit(name, kind, parent, _slug(name, parent), _weight(spec), _own_name(name, parent))
        _read_groups(unit, spec, cohort=True)
        plan.units[name] = unit


def _queue_units(plan: ImportPlan, cohorts: Mapping[str, Any], queues: Mapping[str, Any]) -> None:
    for name in sorted(queues):
        spec = queues[name].get("spec") or {}
        cohort = spec.get("cohortName")
        if name in plan.units:  # a cohort unit's own queue: the residual guarantee it holds is the unit's
            plan.units[name].contract = _contract(plan, spec)
            own = ImportedUnit(name, UnitKind.TEAM, None, "")
            _read_groups(own, spec, cohort=False)
            for key, (nominal, _, _) in own.quotas.items():
                if nominal:
                    plan.units[name].quotas.setdefault(key, [0, -1, -1])[0] += nominal
            continue
        if not cohort:
            plan.notes.append(f"ClusterQueue {name} has no cohort: imported as its own organisation")
            kind, parent = UnitKind.ORGANISATION, None
        else:
            parent_kind = plan.units[cohort].kind
            kind = UnitKind.TEAM if parent_kind in (UnitKind.ORGANISATION, UnitKind.DEPARTMENT) else UnitKind.PROJECT
            parent = cohort
        unit = ImportedUnit(
            name, kind, parent, _slug(name, parent), _weight(spec), _own_name(name, parent), _contract(plan, spec)
        )
        _read_groups(unit, spec, cohort=False)
        plan.units[name] = unit


def _own_name(name: str, parent: str | None) -> str:
    """Empty when ``name`` is the one Allot would derive from the path; else kept as kueue_name.
    (Only right when the parent's own name is derived too; the caller passes the parent's key.)"""
    slug = _slug(name, parent)
    derived = slug if parent is None else f"{parent}.{slug}"
    return "" if derived == name else name


def _weight(spec: Mapping[str, Any]) -> str:
    """The weight as a unit keeps it (4 decimals, as Allot's units do; a positive one never 0). Allot compiles
    weights relative to the largest sibling's (0.666666667), which is the same share to Kueue at 0.6667."""
    text = str((spec.get("fairSharing") or {}).get("weight", "1"))
    try:
        value = parse_decimal_quantity(text)
    except ValueError:
        return text  # named by the import's checks
    if value <= 0:
        return "0"
    rounded = max(value.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP), Decimal("0.0001"))
    return format(rounded.normalize(), "f")


def _contract(plan: ImportPlan, spec: Mapping[str, Any]) -> str:
    preemption = spec.get("preemption") or {}
    reclaim = str(preemption.get("reclaimWithinCohort", "Never"))
    within = str(preemption.get("withinClusterQueue", "Never"))
    name = f"imported-{reclaim}-{within}".lower()
    plan.contracts[name] = (reclaim, within)
    return name


def _read_groups(unit: ImportedUnit, spec: Mapping[str, Any], *, cohort: bool) -> None:
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                shared = entry["name"] == EQUIVALENTS  # a shared flavor's GPUs, in millionths of an equivalent
                try:
                    resource = Resource.GPU if shared else Resource(entry["name"])
                except ValueError:
                    continue  # reported once by the caller through unknown resources
                scale = MICRO if shared else 1
                values = [
                    _amount(resource, entry.get("nominalQuota", 0)) // scale,
                    _amount(resource, entry["borrowingLimit"]) // scale if "borrowingLimit" in entry else -1,
                    _amount(resource, entry["lendingLimit"]) // scale if "lendingLimit" in entry else -1,
                ]
                key = (flavor["name"], resource)
                if shared and not any(v > 0 for v in values) and key in unit.quotas:
                    continue  # a whole flavor's currency entry (0): its nvidia.com/gpu says it all
                unit.quotas[key] = values


def _amount(resource: Resource, raw: Any) -> int:
    value = parse_decimal_quantity(str(raw))
    return int(value * 1000) if resource is Resource.CPU else int(value)


def _namespaces(
    plan: ImportPlan, local_queues: Iterable[Mapping[str, Any]], queues: Mapping[str, Any], cohorts: Mapping[str, Any]
) -> None:
    for lq in local_queues:
        meta, queue = lq["metadata"], (lq.get("spec") or {}).get("clusterQueue")
        if queue not in plan.units:
            plan.notes.append(
                f"LocalQueue {meta.get('namespace')}/{meta['name']} points to unknown ClusterQueue "
                f"{queue}: not imported"
            )
            continue
        plan.units[queue].namespaces[meta["namespace"]] = "" if meta["name"] == queue else meta["name"]


def _cohort_guarantees(plan: ImportPlan) -> None:
    """A cohort's guarantee = the capacity it adds + its children's guarantees, bottom-up."""
    for unit in reversed(plan.top_down()):
        for child in (u for u in plan.units.values() if u.parent == unit.key):
            for key, (g, _, _) in child.quotas.items():
                own = unit.quotas.setdefault(key, [0, -1, -1])
                own[0] += g


def semantic(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an object means to Kueue, for "the same objects" after import → compile: quantities by
    value, Kueue's defaults filled in (queueingStrategy BestEffortFIFO, weight 1, preemption Never,
    lendingLimit = nominalQuota), namespace selectors as the set of namespaces they name, our own
    labels and annotations left out."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    head = (obj["kind"], meta.get("namespace", ""), meta["name"])
    if obj["kind"] == "ResourceFlavor":
        return (
            *head,
            _frozen(spec.get("nodeLabels") or {}),
            _frozen(spec.get("nodeTaints") or []),
            _frozen(spec.get("tolerations") or []),
        )
    if obj["kind"] == "LocalQueue":
        return (*head, spec.get("clusterQueue"))
    if obj["kind"] == "WorkloadPriorityClass":
        return (*head, obj.get("value"))
    # Kueue reads a weight as its milli-value (rounded up): 0.666666667 and 0.6667 are the same weight to it
    weight = parse_decimal_quantity(str((spec.get("fairSharing") or {}).get("weight", "1")))
    weight = weight.quantize(Decimal("0.001"), rounding=ROUND_CEILING)
    groups = tuple(
        (
            tuple(g.get("coveredResources") or ()),
            tuple(
                (f["name"], tuple((r["name"], *_limits(r)) for r in f.get("resources") or ()))
                for f in g.get("flavors") or ()
            ),
        )
        for g in spec.get("resourceGroups") or ()
    )
    if obj["kind"] == "Cohort":
        return (*head, spec.get("parentName"), weight, groups)
    preemption = spec.get("preemption") or {}
    return (
        *head,
        spec.get("cohortName"),
        weight,
        spec.get("queueingStrategy", "BestEffortFIFO"),
        preemption.get("reclaimWithinCohort", "Never"),
        preemption.get("withinClusterQueue", "Never"),
        _namespaces_of(spec.get("namespaceSelector")),
        groups,
    )


def _limits(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    nominal = parse_decimal_quantity(str(entry.get("nominalQuota", 0)))
    borrowing = entry.get("borrowingLimit")
    lending = entry.get("lendingLimit")
    return (
        nominal,
        None if borrowing is None else parse_decimal_quantity(str(borrowing)),
        nominal if lending is None else parse_decimal_quantity(str(lending)),
    )


def _namespaces_of(selector: Mapping[str, Any] | None) -> Any:
    if selector is None:
        return frozenset()
    names: set[str] = set()
    label = "kubernetes.io/metadata.name"
    if label in (selector.get("matchLabels") or {}):
        names.add(selector["matchLabels"][label])
    for expression in selector.get("matchExpressions") or []:
        if expression.get("key") == label and expression.get("operator") == "In":
            names.update(expression.get("values") or [])
    if not names and not selector.get("matchExpressions") and not selector.get("matchLabels"):
        return "all namespaces"
    return frozenset(names)


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
