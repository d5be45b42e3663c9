"""Snapshot + cluster → Kueue objects.

Mapping (DESIGN.md, "Compiling to Kueue"):

* flavor → ``ResourceFlavor`` (nodeLabels, nodeTaints, tolerations);
* organisation, department, and a team or project whose descendants have caps of their own on this
  cluster → ``Cohort`` (``parentName`` = the parent's cohort). A Cohort's ``nominalQuota`` *adds*
  capacity, so it carries only the unit's residual guarantee (guarantee − Σ children's guarantees):
  summed over the tree, capacity is exactly the organisation's guarantee. ``borrowingLimit`` = burst
  and ``lendingLimit`` = lendable cap the subtree (not on the root, which has no parent);
* any other team or project → ``ClusterQueue`` (``nominalQuota`` = guarantee, ``borrowingLimit`` =
  burst, ``lendingLimit`` = lendable), collecting the namespaces of its uncapped descendants. A
  Cohort unit with namespaces of its own also gets a ClusterQueue of the same name, which holds the
  unit's residual guarantee as its ``nominalQuota`` (the Cohort then holds none): Kueue preempts for a
  reclaim only workloads of queues above their nominal quota, so the unit's own work inside the part of its
  guarantee its children do not hold is protected like any guarantee (with nominal 0 it was the first
  victim of every reclaim in its cohort, seen on a real Kueue); beyond that it borrows — its children's idle
  guarantees first of all — up to the unit's ceiling (``borrowingLimit`` = ceiling − residual), and says so;
* bound namespace → ``LocalQueue`` (same name as its ClusterQueue);
* tier → ``WorkloadPriorityClass`` ``allot-p0`` … (larger value wins);
* a shared flavor (MIG slices, MPS or time-sliced shares: quotas.policy.sharing) → its GPU quota in millionths
  of a GPU-equivalent, ``allot.dev/gpu-equivalent-millionths``, which the queues then cover beside
  ``nvidia.com/gpu`` (0 on a shared flavor; the currency 0 on a whole one); the cluster's Kueue configuration
  transforms every slice into it by its weight (:mod:`.config`), so slices count by weight against one quota;
* fair-share weight → ``fairSharing.weight`` on every Cohort and ClusterQueue, **relative to the largest
  of its siblings'** (which gets 1). Kueue compares shares among siblings only, so a common factor changes
  no decision — but it computes a share in integers, ``borrowed‰ × 1000 ÷ weight's milli-value``, so
  weights such as 20–40 made every share read 0 (v0.13) and fair sharing never rebalanced; relative
  weights keep shares at least as large as the borrowed per-mille. **0 is an infinite share** — the unit
  is always last to borrow and first to be preempted — so a positive weight is never rounded to 0, and
  one below 10⁻⁹, which Kueue refuses, is a compile error. Kueue reads them only under fair sharing (the cluster's
  ``sharing``: ``fair`` or ``admission``); ``admission`` also sets ``admissionScope.admissionMode:
  UsageBasedAdmissionFairSharing`` on every ClusterQueue and each LocalQueue's ``fairSharing.weight``
  (its unit's), and needs Kueue's ``admissionFairSharing`` configuration (:mod:`.config`);
* the organisation → labels ``allot.dev/unit``, ``allot.dev/department`` and ``allot.dev/cost-centre``
  on Cohorts, ClusterQueues and LocalQueues, which Kueue's ``metrics.customLabels`` promote onto its own
  metrics (``custom_unit`` …) so they join Allot's showback;
* a spent GPU-hour budget (quotas.policy.budgets, evaluated at the target's ``at``): ``no-borrowing``
  → the unit's ``borrowingLimit: 0`` on the flavor's GPUs (its own queue of a cohort unit: its
  guarantee); ``hold`` covering every tier → its subtree's LocalQueues ``stopPolicy: Hold`` (running
  workloads finish); both end when the period does or the budget is raised. ``deny`` is the webhook's.

Names are the unit path with dots (``acme.research.nlp``): slugs have no dots, so names never collide.
Flavors are listed cheapest billing weight first, and every ClusterQueue says
``flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor}``: Kueue takes the
first flavor where the work fits **inside the queue's own quota**, and only when none does, the first
where it can borrow — so work fills older pools before the newest (seed 8.12.2) but never borrows a
cheap flavor while its own guarantee on another sits idle (Kueue's default, ``Borrow``, stops at the
first flavor where borrowing is possible).

Reclamation: a contract's ``reclaimWithinCohort`` (``Any`` by default) goes on every ClusterQueue under it.
Kueue's ``LowerPriority`` takes lent quota back only from lower-priority borrowers, so a guarantee would
not come back from borrowers of the same or a higher tier; a contract chooses it only to spare them, and
the coverage report says so (quotas.policy.kueue.coverage).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import yaml

from ..budget_effects import effects
from ..budgets import BudgetAction
from ..labels import LABEL_COST_CENTRE, LABEL_DEPARTMENT, LABEL_UNIT
from ..quantity import Resource
from ..sharing import EQUIVALENTS
from ..snapshot import ZERO, Contract, OrgSnapshot, UnitKind
from .target import (
    ANNOTATION_REVISION,
    ANNOTATION_UNIT,
    API_VERSION,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    MAX_NAME,
    NAMESPACE_LABEL,
    CompileError,
    KueueFlavor,
    KueueTarget,
    Object,
    amount,
    kueue_name,
    label_value,
    priority_class_name,
)

MIN_WEIGHT = 1e-9
"""Kueue refuses a positive fairSharing.weight below this (its CRD: "When not 0, Weight must be greater than 10^-9")."""
SHARING = ("classic", "fair", "admission")
FLAVOR_FUNGIBILITY = {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}
"""Own guarantee first: a flavor where the work must borrow or preempt is taken only when no flavor fits."""
DEFAULT_RECLAIM = "Any"
"""A guarantee comes back whatever the borrower's tier (a contract may choose LowerPriority to spare some)."""


def compile_kueue(snapshot: OrgSnapshot, target: KueueTarget) -> list[Object]:
    """Every Kueue object the cluster should hold, in apply order, each part sorted."""
    return _Compiler(snapshot, target).run()


def render_yaml(objects: Sequence[Object]) -> str:
    """Deterministic multi-document YAML (sorted keys)."""
    return yaml.safe_dump_all(list(objects), sort_keys=True, default_flow_style=False, width=1000)


class _Compiler:
    def __init__(self, snapshot: OrgSnapshot, target: KueueTarget) -> None:
        if target.sharing not in SHARING:
            raise CompileError(f"{target.cluster}: sharing {target.sharing!r} is not one of {', '.join(SHARING)}")
        if target.sharing == "admission" and target.half_life_s <= 0:
            raise CompileError(
                f"{target.cluster}: admission fair sharing with a half-life of 0 s: Kueue would reset usage at once "
                "and silently order nothing by it; give the cluster a fair-share half-life (e.g. 7 days)"
            )
        self.s = snapshot
        self.t = target
        self.flavors = sorted(target.flavors, key=lambda f: (f.order, f.billing_weight, f.name))
        keys = {f.key for f in target.flavors}
        self.resources = sorted(
            {r for (u, fk, r), q in snapshot.quotas.items() if fk in keys and q.guarantee > 0 and u in snapshot.units},
            key=lambda r: r.value,
        )
        self.capped = {u for (u, fk, _), q in snapshot.quotas.items() if fk in keys and q != ZERO}
        self.present = self._present()
        spent = (
            effects(snapshot.budgets, snapshot.budget_spend, snapshot.children, snapshot.tiers, target.at)
            if target.at is not None
            else []
        )
        self.no_borrowing = {(e.unit_id, e.flavor) for e in spent if e.action is BudgetAction.NO_BORROWING}
        self.held_namespaces = {
            ns
            for e in spent
            if e.queue_hold and e.flavor in keys
            for uid in e.units
            for ns in target.namespaces.get(uid, ())
        }
        """Namespaces of a unit under a spent hold budget: their LocalQueues stop, whichever queue they feed."""

    def borrowing(self, uid: int, flavor: str, resource: Resource, allowed: int) -> int:
        """``allowed``, or 0 for GPUs while a no-borrowing budget of the unit is spent."""
        return 0 if resource is Resource.GPU and (uid, flavor) in self.no_borrowing else allowed

    def _present(self) -> set[int]:
        """Units with an object on this cluster: those with quota here, and for namespaces the unit
        itself or, for an uncapped project, the nearest unit above it that is not one; plus all
        their ancestors. Uncapped projects fold into their team's queue."""
        present: set[int] = set()
        anchors = set(self.capped)
        for uid, namespaces in self.t.namespaces.items():
            node: int | None = uid if namespaces and uid in self.s.units else None
            while node is not None and self.s.units[node].kind is UnitKind.PROJECT and node not in self.capped:
                node = self.s.units[node].parent_id
            if node is not None:
                anchors.add(node)
        for uid in anchors:
            if uid in self.s.units:
                present.add(uid)
                present.update(self.s.ancestors(uid))
        return present

    def children(self, uid: int | None) -> list[int]:
        return [c for c in self.s.children.get(uid, ()) if c in self.present]

    def is_cohort(self, uid: int) -> bool:
        unit = self.s.units[uid]
        if unit.kind in (UnitKind.ORGANISATION, UnitKind.DEPARTMENT):
            return True
        return any(self._has_capped_descendant(c) for c in self.children(uid))

    def _has_capped_descendant(self, uid: int) -> bool:
        return uid in self.capped or any(self._has_capped_descendant(c) for c in self.children(uid))

    def run(self) -> list[Object]:
        objects: list[Object] = [self.flavor(f) for f in sorted(self.flavors, key=lambda f: f.name)]
        cohorts: list[Object] = []
        queues: list[Object] = []
        local: list[Object] = []
        pending: list[tuple[int, str | None]] = [(root, None) for root in self.children(None)]
        while pending:
            uid, parent = pending.pop(0)
            name = self.s.units[uid].kueue_name or kueue_name(self.s.units[uid].path)
            if len(name) > MAX_NAME:
                raise CompileError(f"{self.s.units[uid].path}: the Kueue name {name[:40]}… is longer than {MAX_NAME}")
            if self.is_cohort(uid):
                namespaces = self.namespaces_of(uid)
                cohorts.append(self.cohort(uid, name, parent, own_queue=bool(namespaces)))
                pending.extend((c, name) for c in self.children(uid))
                if namespaces:
                    queues.append(self.cluster_queue(uid, name, name, namespaces, own_quota=False))
            else:
                namespaces = self.namespaces_of(uid)
                queues.append(self.cluster_queue(uid, name, parent, namespaces, own_quota=True))
            local.extend(self.local_queue(uid, ns, name) for ns in self.namespaces_of(uid))
        objects += cohorts + sorted(queues, key=lambda o: o["metadata"]["name"])
        objects += sorted(local, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
        objects += [self.priority_class(name) for name in sorted(self.s.tiers)]
        return objects

    # --- namespaces ------------------------------------------------------------------------------
    def namespaces_of(self, uid: int) -> list[str]:
        """The unit's namespaces and those of descendants without objects of their own."""
        found = list(self.t.namespaces.get(uid, ()))
        for child in self.s.children.get(uid, ()):
            if child not in self.present:
                found += self.namespaces_of(child)
        return sorted(set(found))

    # --- objects ---------------------------------------------------------------------------------
    def org_labels(self, uid: int) -> dict[str, str]:
        """The unit, its department and its cost centre, as label values Kueue's metrics can carry."""
        unit = self.s.units[uid]
        labels = {LABEL_UNIT: label_value(unit.kueue_name or kueue_name(unit.path))}
        department = self.s.department(uid)
        if department is not None:
            labels[LABEL_DEPARTMENT] = department.slug
        cost_centre = self.s.effective_cost_centre(uid)
        if cost_centre:
            labels[LABEL_COST_CENTRE] = cost_centre
        return labels

    def meta(
        self, name: str, path: str | None = None, namespace: str | None = None, uid: int | None = None
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: self.t.cluster}}
        if uid is not None:
            meta["labels"].update(self.org_labels(uid))
        if namespace is not None:
            meta["namespace"] = namespace
        annotations = {ANNOTATION_REVISION: str(self.t.revision)}
        if path is not None:
            annotations[ANNOTATION_UNIT] = path
        meta["annotations"] = annotations
        return meta

    def flavor(self, flavor: KueueFlavor) -> Object:
        spec: dict[str, Any] = {"nodeLabels": dict(sorted(flavor.node_labels.items()))}
        if flavor.node_taints:
            spec["nodeTaints"] = [dict(sorted(t.items())) for t in flavor.node_taints]
        if flavor.tolerations:
            spec["tolerations"] = [dict(sorted(t.items())) for t in flavor.tolerations]
        return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": self.meta(flavor.name), "spec": spec}

    def resource_groups(self, uid: int, *, nominal: str, limits: bool) -> list[dict[str, Any]]:
        if not self.resources:
            return []
        flavors = []
        for flavor in self.flavors:
            resources = []
            for name in self.covered:
                resource = self.counted(flavor, name)
                quota = self.s.quota(uid, flavor.key, resource) if resource else ZERO
                if resource is None or nominal == "none":
                    value = 0
                else:
                    value = quota.guarantee if nominal == "own" else self.residual(uid, flavor.key, resource)
                entry: dict[str, Any] = {"name": name, "nominalQuota": amount(name, value)}
                if limits:
                    burst = self.borrowing(uid, flavor.key, resource, quota.burst) if resource else 0
                    entry["borrowingLimit"] = amount(name, burst)
                    entry["lendingLimit"] = amount(name, min(quota.lendable, value))
                resources.append(entry)
            flavors.append({"name": flavor.name, "resources": resources})
        return [{"coveredResources": list(self.covered), "flavors": flavors}]

    @cached_property
    def covered(self) -> list[str]:
        """The resource names the queues cover: the quota resources, and the GPU-equivalents' currency
        (quotas.policy.sharing.EQUIVALENTS) when a shared flavor's GPUs are among them (a flavor's other GPU
        name gets 0)."""
        names = [r.value for r in self.resources]
        if Resource.GPU in self.resources and any(f.sharing.shared for f in self.flavors):
            names.append(EQUIVALENTS)
        return names

    def counted(self, flavor: KueueFlavor, name: str) -> Resource | None:
        """The quota resource an entry of ``flavor`` named ``name`` carries: a shared flavor's GPUs are its
        GPU-equivalents, a whole flavor's its ``nvidia.com/gpu``; the other is None (0)."""
        if name == EQUIVALENTS:
            return Resource.GPU if flavor.sharing.shared else None
        resource = Resource(name)
        return None if resource is Resource.GPU and flavor.sharing.shared else resource

    def residual(self, uid: int, flavor: str, resource: Resource) -> int:
        own = self.s.quota(uid, flavor, resource).guarantee
        return max(0, own - sum(self.s.quota(c, flavor, resource).guarantee for c in self.children(uid)))

    def cohort(self, uid: int, name: str, parent: str | None, *, own_queue: bool = False) -> Object:
        """The unit's Cohort. Its residual guarantee (beyond its children's) is its own nominal quota — or, when
        the unit has a queue of its own (``own_queue``), that queue's, so its own work inside it is not borrowing
        in Kueue's eyes and no reclaim takes it (a Cohort's nominal quota is capacity any member may use)."""
        unit = self.s.units[uid]
        spec: dict[str, Any] = {"fairSharing": {"weight": self.weight(uid)}}
        if parent is not None:
            spec["parentName"] = parent
        groups = self.resource_groups(uid, nominal="none" if own_queue else "residual", limits=False)
        if parent is not None:
            for group in groups:
                for flavor in group["flavors"]:
                    for entry in flavor["resources"]:
                        kf = _flavor(self.flavors, flavor["name"])
                        resource = self.counted(kf, entry["name"])
                        quota = self.s.quota(uid, kf.key, resource) if resource else ZERO
                        burst = self.borrowing(uid, kf.key, resource, quota.burst) if resource else 0
                        entry["borrowingLimit"] = amount(entry["name"], burst)
                        entry["lendingLimit"] = amount(entry["name"], quota.lendable)
        if groups:
            spec["resourceGroups"] = groups
        return {
            "apiVersion": API_VERSION,
            "kind": "Cohort",
            "metadata": self.meta(name, unit.path, uid=uid),
            "spec": spec,
        }

    def cluster_queue(
        self, uid: int, name: str, cohort: str | None, namespaces: list[str], *, own_quota: bool
    ) -> Object:
        unit = self.s.units[uid]
        spec: dict[str, Any] = {
            "queueingStrategy": "BestEffortFIFO",
            "fairSharing": {"weight": self.weight(uid)},
            "flavorFungibility": dict(FLAVOR_FUNGIBILITY),
        }
        if self.t.sharing == "admission":
            spec["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
        if cohort is not None:
            spec["cohortName"] = cohort
        if namespaces:
            spec["namespaceSelector"] = {
                "matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "In", "values": namespaces}]
            }
        spec["preemption"] = _preemption(self.s.effective_contract(uid))
        if own_quota:
            groups = self.resource_groups(uid, nominal="own", limits=cohort is not None)
        else:
            # a cohort unit's own queue: its residual guarantee (beyond its children's) as its nominal quota, so
            # work inside it is the unit's own and never a reclaim's victim (Kueue preempts only workloads of
            # queues above their nominal quota); beyond it, it borrows its children's idle guarantees and what
            # the cohort may borrow, up to the unit's ceiling. It lends all of it (its Cohort's lendingLimit caps
            # what leaves the subtree).
            groups = self.resource_groups(uid, nominal="residual", limits=True)
            for group in groups:
                for flavor in group["flavors"]:
                    for entry in flavor["resources"]:
                        kf = _flavor(self.flavors, flavor["name"])
                        resource = self.counted(kf, entry["name"])
                        quota = self.s.quota(uid, kf.key, resource) if resource else ZERO
                        residual = self.residual(uid, kf.key, resource) if resource else 0
                        ceiling = (
                            quota.guarantee + self.borrowing(uid, kf.key, resource, quota.burst) if resource else 0
                        )
                        entry.update(
                            nominalQuota=amount(entry["name"], residual),
                            borrowingLimit=amount(entry["name"], max(0, ceiling - residual)),
                        )
                        entry.pop("lendingLimit", None)
        if groups:
            spec["resourceGroups"] = groups
        meta = self.meta(name, unit.path, uid=uid)
        return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": meta, "spec": spec}

    def local_queue(self, uid: int, namespace: str, queue: str) -> Object:
        spec: dict[str, Any] = {"clusterQueue": queue}
        if self.t.sharing == "admission":  # its turn among the ClusterQueue's queues, by decayed usage ÷ weight
            spec["fairSharing"] = {"weight": self.weight(uid, relative=False)}
        if namespace in self.held_namespaces:
            spec["stopPolicy"] = "Hold"  # a spent hold budget: nothing new admitted, running work finishes
        return {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": self.meta(
                self.t.local_queue_names.get(namespace, queue), self.s.units[uid].path, namespace, uid=uid
            ),
            "spec": spec,
        }

    def weight(self, uid: int, *, relative: bool = True) -> str:
        """The unit's weight relative to the largest of its siblings' on this cluster (see the module); a
        LocalQueue's (admission fair sharing orders a ClusterQueue's LocalQueues by usage ÷ weight in
        floating point) as it is."""
        unit = self.s.units[uid]
        if 0 < unit.weight < MIN_WEIGHT:
            raise CompileError(
                f"{unit.path}: fair-share weight {unit.weight} is below Kueue's smallest ({MIN_WEIGHT}); give 0 "
                "(always last to borrow) or a larger weight"
            )
        if not relative:
            return _weight(unit.weight)
        largest = max((self.s.units[c].weight for c in self.children(unit.parent_id)), default=unit.weight)
        share = unit.weight / largest if largest > 0 else unit.weight
        if 0 < share < MIN_WEIGHT:
            raise CompileError(
                f"{unit.path}: fair-share weight {unit.weight} is below 10⁻⁹ of its largest sibling's ({largest}): "
                "Kueue cannot tell it from 0; give 0 (always last to borrow) or a larger weight"
            )
        return _weight(share)

    def priority_class(self, tier_name: str) -> Object:
        tier = self.s.tiers[tier_name]
        return {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": self.meta(priority_class_name(tier_name)),
            "value": tier.priority,
            "description": tier.display_name or tier_name,
        }


def _flavor(flavors: Sequence[KueueFlavor], name: str) -> KueueFlavor:
    return next(f for f in flavors if f.name == name)


def _weight(weight: float) -> str:
    """Kueue's quantity text for a weight: exact to 10⁻⁹, and never "0" for a positive weight."""
    if weight <= 0:
        return "0"
    text = f"{weight:.9f}".rstrip("0").rstrip(".")
    return text if text not in ("", "0") else f"{MIN_WEIGHT:.9f}".rstrip("0")


def _preemption(contract: Contract | None) -> dict[str, str]:
    if contract is None:
        return {"reclaimWithinCohort": DEFAULT_RECLAIM, "withinClusterQueue": "LowerPriority"}
    return {"reclaimWithinCohort": contract.reclaim_within_cohort, "withinClusterQueue": contract.within_cluster_queue}
