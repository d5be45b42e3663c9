"""Adopt an existing Slurm accounting tree: units, guarantees, burst, contracts, tiers and members
from a live ``sacctmgr`` or a dump file (see quotas/policy/slurm/importer.py for the mapping)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from quotas.errors import InputError
from quotas.models import Cluster, ClusterKind, OrgUnit, ReclamationContract, ResourceFlavor, WorkloadTier
from quotas.policy.quantity import Resource
from quotas.policy.slurm.importer import SlurmImport

from . import bindings, catalogue, quota, units
from .audit import Actor, require_reason

SCHEDULING_ALLOWANCE_S = 120
"""Added to minimum run window + grace for an imported contract's reclaim_within (review it)."""


@dataclass
class SlurmImportResult:
    units: int = 0
    quotas: int = 0
    members: int = 0
    contracts: int = 0
    tiers: int = 0
    notes: list[str] = field(default_factory=list)


@transaction.atomic
def slurm_import(*, actor: Actor, reason: str, cluster: Cluster, plan: SlurmImport) -> SlurmImportResult:
    """Create the imported tree through the ordinary services (validated, audited): all or nothing.

    Raises InputError for a cluster that is not Slurm, an empty plan or an organisation that exists;
    PolicyViolationError when the imported limits break an invariant (the violations say which).
    """
    reason = require_reason(reason)
    if cluster.kind != ClusterKind.SLURM:
        raise InputError("cluster", f"{cluster.name} is a {cluster.kind} cluster", "import into a Slurm cluster")
    if not plan.units:
        raise InputError("source", "no account to import", "point at a cluster or dump with accounts under root")
    for top in plan.units.values():
        if top.parent is None and OrgUnit.objects.filter(path=top.name, archived_at__isnull=True).exists():
            raise InputError(
                "source",
                f"an organisation {top.name!r} exists already",
                "archive it first, or import into an empty tree",
            )
    result = SlurmImportResult(notes=[*plan.losses, *plan.notes])
    flavors = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster)}
    _tiers(actor, reason, plan, result)
    created: dict[str, OrgUnit] = {}
    effective: dict[str, tuple[int, int] | None] = {}
    for item in plan.top_down():
        inherited = effective.get(item.parent) if item.parent else None
        contract = None
        if item.contract is not None and item.contract != inherited:
            contract = _contract(actor, reason, *item.contract, result=result)
        effective[item.name] = item.contract if contract is not None else inherited
        unit = units.org_unit_create(
            actor=actor,
            reason=reason,
            parent=created.get(item.parent) if item.parent else None,
            kind=item.kind.value,
            slug=item.name,
            weight=item.weight,
            contract=contract,
        )
        created[item.name] = unit
        result.units += 1
        changes = [
            quota.QuotaChange(unit.pk, flavors[name].pk, Resource.GPU, gpus, item.burst.get(name, 0), gpus)
            for name, gpus in sorted(item.guarantee.items())
        ] + [
            quota.QuotaChange(unit.pk, flavors[name].pk, Resource.GPU, 0, gpus, 0)
            for name, gpus in sorted(item.burst.items())
            if name not in item.guarantee
        ]
        if changes:
            quota.quota_set_bulk(actor=actor, reason=reason, changes=changes)
            result.quotas += len(changes)
        for username in sorted(set(item.members)):
            # on this cluster only: the site's users are not given accounts on every other Slurm cluster
            bindings.membership_add(
                actor=actor, reason=reason, unit=unit, slurm_username=username, slurm_cluster=cluster
            )
            result.members += 1
    return result


def _contract(actor: Actor, reason: str, grace: int, min_run: int, *, result: SlurmImportResult) -> ReclamationContract:
    """An existing contract with this grace period and minimum run window, or a new one."""
    found = ReclamationContract.objects.filter(grace_period=grace, min_run_window=min_run).order_by("name").first()
    if found is not None:
        return found
    name = f"slurm-grace{grace}-run{min_run}"
    result.contracts += 1
    result.notes.append(
        f"contract {name}: grace period and minimum run window from the burst QOS; reclaim_within set to "
        f"{min_run + grace + SCHEDULING_ALLOWANCE_S} s (run window + grace + 2 min) — set your own"
    )
    return catalogue.contract_set(
        actor=actor,
        reason=reason,
        name=name,
        reclaim_within=min_run + grace + SCHEDULING_ALLOWANCE_S,
        grace_period=grace,
        min_run_window=min_run,
    )


def _tiers(actor: Actor, reason: str, plan: SlurmImport, result: SlurmImportResult) -> None:
    for name, (priority, preemptible, runtime, label) in sorted(plan.tiers.items()):
        existing = WorkloadTier.objects.filter(name=name).first()
        if existing is not None:
            if existing.max_runtime != runtime:
                result.notes.append(
                    f"tier {name}: kept Allot's runtime limit {existing.max_runtime} s (Slurm has {runtime} s)"
                )
            continue
        if WorkloadTier.objects.filter(priority=priority).exists():
            priority = 1 + max(WorkloadTier.objects.values_list("priority", flat=True))
        catalogue.tier_set(
            actor=actor,
            reason=reason,
            name=name,
            display_name=label or name,
            priority=priority,
            preemptible=preemptible,
            max_runtime=runtime,
        )
        result.tiers += 1
