"""Clusters, flavors, capacity reservations, contracts and tiers: create-or-update, validated, audited."""

from __future__ import annotations

import re
from typing import Any, TypeVar

from django.db import models, transaction

from quotas.errors import InputError, full_clean
from quotas.models import (
    CapacityReservation,
    Cluster,
    ClusterKind,
    ReclamationContract,
    ResourceFlavor,
    WorkloadTier,
)
from quotas.policy.contracts import check_promises
from quotas.policy.invariants import check_contracts, check_flavor_capacity
from quotas.policy.sharing import Sharing, SharingError, conflicts
from quotas.policy.violations import PolicyViolationError
from quotas.selectors import org_snapshot, roots_snapshot

from .audit import Actor, audit_event, audit_write, changed_fields, plain, require_reason
from .locks import lock_flavors

M = TypeVar("M", bound=models.Model)


def _upsert(
    model: type[M], lookup: dict[str, Any], fields: dict[str, Any]
) -> tuple[M, bool, dict[str, Any], dict[str, Any]]:
    """Lock and update the row matching ``lookup``, or build a new one; validate it; save it."""
    obj = model._default_manager.select_for_update().filter(**lookup).first()  # type: ignore[attr-defined]
    created = obj is None
    if obj is None:
        obj = model(**lookup, **fields)
        before: dict[str, Any] = {}
        after = {k: plain(v) for k, v in {**lookup, **fields}.items()}
    else:
        before, after = changed_fields(obj, fields)
    full_clean(obj)
    obj.save()
    return obj, created, before, after


def _audit(
    actor: Actor,
    reason: str,
    action: str,
    obj: models.Model,
    obj_repr: str,
    created: bool,
    before: dict[str, Any],
    after: dict[str, Any],
) -> None:
    if created or after:
        audit_write(
            [
                audit_event(
                    actor=actor,
                    action=action,
                    obj_type=obj._meta.model_name or "",
                    obj_id=obj.pk,
                    obj_repr=obj_repr,
                    before=None if created else before,
                    after=after,
                    reason=reason,
                )
            ]
        )


@transaction.atomic
def cluster_set(*, actor: Actor, reason: str, name: str, **fields: Any) -> Cluster:
    """Create or update the cluster ``name``. Its kind cannot change once it has flavors."""
    reason = require_reason(reason)
    existing = Cluster.objects.filter(name=name).first()
    if existing and "kind" in fields and fields["kind"] != existing.kind and existing.flavors.exists():
        raise InputError(
            "kind",
            f"cluster {name} already has flavors as a {existing.kind} cluster",
            "create a new cluster instead of changing its kind",
        )
    prefix = fields.get("slurm_qos_prefix")
    if prefix and not re.fullmatch(r"[a-z0-9_.-]{1,16}", prefix):
        raise InputError(
            "slurm_qos_prefix",
            f"{prefix!r} is not a QOS name prefix Slurm keeps as it is",
            "use up to 16 lowercase letters, digits, '-', '_' or '.', e.g. 'b-'",
        )
    sharing = fields.get("kueue_sharing", existing.kueue_sharing if existing else "classic")
    half_life = fields.get("fairshare_half_life", existing.fairshare_half_life if existing else 7 * 86400)
    if sharing == "admission" and not half_life:
        raise InputError(
            "fairshare_half_life",
            "admission fair sharing with a half-life of 0 s: Kueue would reset usage at once and order nothing by it",
            "give the cluster's fair-share half-life in seconds, e.g. 604800 (7 days)",
        )
    cluster, created, before, after = _upsert(Cluster, {"name": name}, fields)
    _audit(actor, reason, "cluster_set", cluster, name, created, before, after)
    return cluster


def _check_capacity(flavor: ResourceFlavor) -> None:
    problems = check_flavor_capacity(roots_snapshot(), flavor.key)
    if problems:
        raise PolicyViolationError(problems)


def _check_sharing(flavor: ResourceFlavor) -> None:
    """Its sharing settings give profiles Allot can count, at the weights the cluster's other flavors give
    the same resources."""
    try:
        spec = flavor.sharing_spec
    except SharingError as exc:
        raise InputError(exc.field, exc.message) from None
    if spec.sharing in (Sharing.MPS, Sharing.TIME_SLICING) and flavor.cluster.kind == ClusterKind.SLURM:
        raise InputError(
            "sharing",
            f"{spec.sharing.value} on Slurm is Slurm's own gres/shard or gres/mps, which Allot does not govern yet",
            "use mig (each profile a GPU type: gres/gpu:<flavor>_<profile>) or whole",
        )
    others = {}
    for other in ResourceFlavor.objects.filter(cluster=flavor.cluster).exclude(pk=flavor.pk):
        try:
            others[other.name] = other.sharing_spec
        except SharingError:
            continue  # its own edit names what is wrong with it
    clashes = conflicts({**others, flavor.name: spec})
    if clashes:
        raise InputError("profile_weights", clashes[0])


@transaction.atomic
def flavor_set(*, actor: Actor, reason: str, cluster: Cluster, name: str, **fields: Any) -> ResourceFlavor:
    """Create or update a flavor. Locks its row (as root quota edits do), then re-checks that the
    top-level guarantees still fit its reclaimable capacity."""
    reason = require_reason(reason)
    flavor, created, before, after = _upsert(ResourceFlavor, {"cluster": cluster, "name": name}, fields)
    _check_sharing(flavor)
    _check_capacity(flavor)
    _audit(actor, reason, "flavor_set", flavor, flavor.key, created, before, after)
    return flavor


@transaction.atomic
def reservation_set(
    *,
    actor: Actor,
    reason: str,
    flavor: ResourceFlavor,
    name: str,
    devices: int | None = None,
    description: str | None = None,
) -> CapacityReservation:
    """Create or resize a non-preemptible reservation; refused when guarantees would no longer fit.
    A field left out (None) keeps its value; a new reservation needs ``devices``."""
    reason = require_reason(reason)
    lock_flavors([flavor.pk])
    fields: dict[str, Any] = {k: v for k, v in (("devices", devices), ("description", description)) if v is not None}
    if "devices" not in fields and not CapacityReservation.objects.filter(flavor=flavor, name=name).exists():
        raise InputError("devices", f"reservation {name} on {flavor.key} is new", "say how many devices it holds")
    reservation, created, before, after = _upsert(CapacityReservation, {"flavor": flavor, "name": name}, fields)
    _check_capacity(flavor)
    _audit(actor, reason, "reservation_set", reservation, f"{flavor.key} {name}", created, before, after)
    return reservation


@transaction.atomic
def reservation_delete(*, actor: Actor, reason: str, reservation: CapacityReservation) -> None:
    reason = require_reason(reason)
    before = {"devices": reservation.devices, "description": reservation.description}
    audit_write(
        [
            audit_event(
                actor=actor,
                action="reservation_delete",
                obj_type="capacityreservation",
                obj_id=reservation.pk,
                obj_repr=f"{reservation.flavor.key} {reservation.name}",
                before=before,
                after=None,
                reason=reason,
            )
        ]
    )
    reservation.delete()


def _check_contracts(*, promises: bool = False) -> None:
    """Every contract feasible and consistent with the tiers; with ``promises``, every contract's
    promise holding for its worst-case borrower (this reads the quotas too)."""
    problems = check_contracts(org_snapshot(include_quotas=False))
    if promises and not problems:
        problems = check_promises(org_snapshot())
    if problems:
        raise PolicyViolationError(problems)


@transaction.atomic
def contract_set(*, actor: Actor, reason: str, name: str, **fields: Any) -> ReclamationContract:
    """Create or update a reclamation contract; refused when it, or any contract in use, would be
    infeasible or inconsistent with a tier."""
    reason = require_reason(reason)
    contract, created, before, after = _upsert(ReclamationContract, {"name": name}, fields)
    _check_contracts(promises=True)
    _audit(actor, reason, "contract_set", contract, name, created, before, after)
    return contract


@transaction.atomic
def tier_set(*, actor: Actor, reason: str, name: str, **fields: Any) -> WorkloadTier:
    """Create or update a workload tier; refused when inconsistent with a contract in use."""
    reason = require_reason(reason)
    if "priority" in fields and WorkloadTier.objects.filter(priority=fields["priority"]).exclude(name=name).exists():
        raise InputError(
            "priority",
            f"another tier already has priority {fields['priority']}",
            "give every tier its own priority value (larger wins)",
        )
    tier, created, before, after = _upsert(WorkloadTier, {"name": name}, fields)
    _check_contracts()
    _audit(actor, reason, "tier_set", tier, name, created, before, after)
    return tier
