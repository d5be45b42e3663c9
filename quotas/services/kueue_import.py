"""Adopt an existing Kueue setup: build units, flavors, quotas and bindings from its objects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from quotas.errors import InputError
from quotas.models import Cluster, ClusterKind, OrgUnit, ReclamationContract, ResourceFlavor
from quotas.policy.kueue.importer import ImportPlan, read_kueue
from quotas.policy.quantity import Resource

from . import bindings, catalogue, quota, units
from .audit import Actor, require_reason

DEFAULT_CONTRACT = {"reclaim_within": 900, "grace_period": 60, "min_run_window": 0, "checkpoint_every": 900}


@dataclass
class ImportResult:
    units: int = 0
    quotas: int = 0
    namespaces: int = 0
    flavors: int = 0
    notes: list[str] = field(default_factory=list)


@transaction.atomic
def kueue_import(*, actor: Actor, reason: str, cluster: Cluster, objects: Iterable[Mapping[str, Any]]) -> ImportResult:
    """Import Kueue objects into ``cluster`` (a Kubernetes cluster record): all of it or nothing.

    Everything goes through the ordinary services, so the invariants are checked and each change
    is audited. Raises InputError when there is nothing to import or a top-level unit exists;
    PolicyViolationError when the objects break an invariant (the violations say which).
    """
    reason = require_reason(reason)
    if cluster.kind != ClusterKind.KUBERNETES:
        raise InputError("cluster", f"{cluster.name} is a {cluster.kind} cluster", "import into a Kubernetes cluster")
    plan = read_kueue(objects)
    if not plan.units:
        raise InputError("objects", "no Cohort or ClusterQueue found", "point at Kueue v1beta2 YAML or a cluster")
    result = ImportResult(notes=list(plan.notes))
    for unit in plan.top_down():
        if unit.parent is None and OrgUnit.objects.filter(path=unit.slug, archived_at__isnull=True).exists():
            raise InputError(
                "objects",
                f"an organisation {unit.slug!r} exists already",
                "archive it first, or import into an empty tree",
            )
    flavors = _flavors(actor, reason, cluster, plan, result)
    for name, (reclaim, within) in sorted(plan.contracts.items()):
        if not ReclamationContract.objects.filter(name=name).exists():
            catalogue.contract_set(
                actor=actor,
                reason=reason,
                name=name,
                reclaim_within_cohort=reclaim,
                within_cluster_queue=within,
                **DEFAULT_CONTRACT,
            )
            result.notes.append(
                f"contract {name}: preemption imported; reclaim_within 15m and grace 1m are defaults — set your own"
            )
    for tier, (priority, description) in sorted(plan.tiers.items()):
        catalogue.tier_set(actor=actor, reason=reason, name=tier, priority=priority, display_name=description or tier)
    _units(actor, reason, cluster, plan, flavors, result)
    return result


def _flavors(
    actor: Actor, reason: str, cluster: Cluster, plan: ImportPlan, result: ImportResult
) -> dict[str, ResourceFlavor]:
    roots = [u for u in plan.units.values() if u.parent is None]
    found = {}
    for name, spec in sorted(plan.flavors.items()):
        promised = sum(u.quotas.get((name, Resource.GPU), [0])[0] for u in roots)
        found[name] = catalogue.flavor_set(
            actor=actor,
            reason=reason,
            cluster=cluster,
            name=name,
            accelerator_model="(imported from Kueue)",
            device_memory_gb=0,
            physical_devices=promised,
            node_labels=spec["node_labels"],
            tolerations=spec["tolerations"],
            queue_order=spec.get("queue_order", 0),
        )
        result.flavors += 1
        result.notes.append(
            f"flavor {name}: Kueue does not know the device count; set to the {promised} GPUs "
            f"promised — set the real physical count, headroom and reservations"
        )
    return found


def _units(
    actor: Actor,
    reason: str,
    cluster: Cluster,
    plan: ImportPlan,
    flavors: dict[str, ResourceFlavor],
    result: ImportResult,
) -> None:
    created: dict[str, OrgUnit] = {}
    ceilings: dict[tuple[str, str, Resource], int] = {}
    for item in plan.top_down():
        parent = created.get(item.parent) if item.parent else None
        contract = ReclamationContract.objects.filter(name=item.contract).first() if item.contract else None
        unit = units.org_unit_create(
            actor=actor,
            reason=reason,
            parent=parent,
            kind=item.kind.value,
            slug=item.slug,
            weight=item.weight,
            contract=contract,
            kueue_name=item.kueue_name,
        )
        created[item.key] = unit
        result.units += 1
        changes = []
        for (flavor, resource), (guarantee, burst, lendable) in sorted(item.quotas.items(), key=str):
            if flavor not in flavors:
                result.notes.append(f"{unit.path}: flavor {flavor} has no ResourceFlavor object; quota skipped")
                continue
            parent_ceiling = ceilings.get((item.parent or "", flavor, resource))
            if burst < 0:  # unlimited borrowing: as far as the parent's ceiling allows
                burst = 0 if parent_ceiling is None else max(0, parent_ceiling - guarantee)
            lendable = guarantee if lendable < 0 else lendable
            ceilings[(item.key, flavor, resource)] = guarantee + burst
            changes.append(quota.QuotaChange(unit.pk, flavors[flavor].pk, resource, guarantee, burst, lendable))
        if changes:
            quota.quota_set_bulk(actor=actor, reason=reason, changes=changes)
            result.quotas += len(changes)
        for namespace, local_queue in sorted(item.namespaces.items()):
            bindings.namespace_bind(
                actor=actor,
                reason=reason,
                unit=unit,
                cluster=cluster,
                namespace=namespace,
                local_queue_name=local_queue,
            )
            result.namespaces += 1
