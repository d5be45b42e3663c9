"""The organisation tree: create, update, move, archive and unarchive units."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Concat, Substr
from django.utils import timezone

from quotas.errors import InputError, full_clean
from quotas.models import NamespaceBinding, OrgUnit, ReclamationContract, WorkloadTier
from quotas.policy import UnitKind
from quotas.policy.contracts import check_promises
from quotas.policy.invariants import check_contracts, check_move, validate_tree
from quotas.policy.structure import check_placement
from quotas.policy.violations import PolicyViolationError
from quotas.selectors import org_snapshot

from .audit import Actor, audit_event, audit_write, changed_fields, require_reason
from .locks import lock_units

_UNSET: Any = object()


def _unit_state(unit: OrgUnit) -> dict[str, Any]:
    return {
        "path": unit.path,
        "kind": unit.kind,
        "name": unit.name,
        "weight": str(unit.weight),
        "contract": unit.contract.name if unit.contract else None,
        "slurm_account": unit.slurm_account,
        "cost_centre": unit.cost_centre,
        "parent": unit.parent.path if unit.parent else None,
    }


def _weight(value: object) -> Decimal:
    try:
        weight = Decimal(str(value))
    except InvalidOperation as exc:
        raise InputError("weight", f"{value!r} is not a number", "use a positive number such as 1 or 2.5") from exc
    if not weight > 0 or not weight.is_finite():
        raise InputError("weight", f"weight must be positive, got {value}", "use a positive number such as 1")
    return weight


def _clean(unit: OrgUnit, exclude: Iterable[str] = ()) -> None:
    full_clean(unit, exclude=[*exclude, "path", "depth", "parent", "contract"])


def _save(unit: OrgUnit) -> None:
    """Save; the only unique constraint a clean unit can still hit is its Slurm account name."""
    try:
        with transaction.atomic():
            unit.save()
    except IntegrityError as exc:
        raise InputError(
            "slurm_account",
            f"{unit.slurm_account!r} is already used by another unit",
            "choose another Slurm account name",
        ) from exc


@transaction.atomic
def org_unit_create(
    *,
    actor: Actor,
    reason: str,
    parent: OrgUnit | None,
    kind: str,
    slug: str,
    name: str = "",
    weight: object = 1,
    description: str = "",
    contract: ReclamationContract | None = None,
    slurm_account: str = "",
    leads: Iterable[User] = (),
    kueue_name: str = "",
    cost_centre: str = "",
) -> OrgUnit:
    """Create a unit under ``parent`` (``None``: a new organisation). Locks the parent.

    Raises InputError for a bad slug, kind, weight or a duplicate path; PolicyViolationError when the
    kind cannot sit under the parent's kind.
    """
    reason = require_reason(reason)
    try:
        unit_kind = UnitKind(kind)
    except ValueError as exc:
        raise InputError("kind", f"unknown kind {kind!r}", "use organisation, department, team or project") from exc
    if parent is not None:
        lock_units([parent.pk])
        parent.refresh_from_db()
        if parent.archived_at is not None:
            raise InputError("parent", f"{parent.path} is archived", "pick an active parent")
    path = slug if parent is None else f"{parent.path}/{slug}"
    problems = check_placement(path, unit_kind, UnitKind(parent.kind) if parent else None)
    if problems:
        raise PolicyViolationError(problems)
    unit = OrgUnit(
        parent=parent,
        kind=unit_kind.value,
        slug=slug,
        name=name or slug,
        weight=_weight(weight),
        description=description,
        contract=contract,
        slurm_account=slurm_account,
        kueue_name=kueue_name,
        cost_centre=cost_centre,
        path=path,
        depth=0 if parent is None else parent.depth + 1,
    )
    _clean(unit)
    if OrgUnit.objects.filter(path=path, archived_at__isnull=True).exists():
        raise InputError("slug", f"{path} already exists", "choose another slug")
    _save(unit)
    unit.leads.set(list(leads))
    after = {**_unit_state(unit), "leads": sorted(u.get_username() for u in leads)}
    audit_write(
        [
            audit_event(
                actor=actor,
                action="org_unit_create",
                obj_type="org_unit",
                obj_id=unit.pk,
                obj_repr=path,
                before=None,
                after=after,
                reason=reason,
                unit_path=path,
            )
        ]
    )
    return unit


@transaction.atomic
def org_unit_update(
    *,
    actor: Actor,
    reason: str,
    unit: OrgUnit,
    name: str | None = None,
    description: str | None = None,
    weight: object = None,
    contract: ReclamationContract | None = _UNSET,
    slurm_account: str | None = None,
    leads: Iterable[User] | None = None,
    allowed_tiers: Iterable[WorkloadTier] | None = None,
    cost_centre: str | None = None,
) -> OrgUnit:
    """Change a unit's own attributes (not its place: see :func:`org_unit_move`). Locks the unit.

    A contract change is checked for feasibility and tier consistency.
    """
    reason = require_reason(reason)
    lock_units([unit.pk])
    unit.refresh_from_db()
    if unit.archived_at is not None:
        raise InputError("unit", f"{unit.path} is archived", "archived units cannot be changed")
    values: dict[str, Any] = {}
    if name is not None:
        values["name"] = name
    if description is not None:
        values["description"] = description
    if weight is not None:
        values["weight"] = _weight(weight)
    if contract is not _UNSET:
        values["contract"] = contract
    if slurm_account is not None:
        values["slurm_account"] = slurm_account
    if cost_centre is not None:
        values["cost_centre"] = cost_centre
    before, after = changed_fields(unit, values)
    _clean(unit)
    _save(unit)
    if "contract" in after:
        problems = check_contracts(org_snapshot(include_quotas=False)) or check_promises(org_snapshot())
        if problems:
            raise PolicyViolationError(problems)
    _set_many(unit, "leads", leads, lambda u: u.get_username(), before, after)
    _set_many(unit, "allowed_tiers", allowed_tiers, lambda t: t.name, before, after)
    if after:
        audit_write(
            [
                audit_event(
                    actor=actor,
                    action="org_unit_update",
                    obj_type="org_unit",
                    obj_id=unit.pk,
                    obj_repr=unit.path,
                    before=before,
                    after=after,
                    reason=reason,
                    unit_path=unit.path,
                )
            ]
        )
    return unit


def _set_many(
    unit: OrgUnit, field: str, items: Iterable[Any] | None, label: Any, before: dict[str, Any], after: dict[str, Any]
) -> None:
    if items is None:
        return
    manager = getattr(unit, field)
    old = sorted(label(x) for x in manager.all())
    new_items = list(items)
    new = sorted(label(x) for x in new_items)
    if old != new:
        manager.set(new_items)
        before[field], after[field] = old, new


@transaction.atomic
def org_unit_move(*, actor: Actor, reason: str, unit: OrgUnit, new_parent: OrgUnit) -> OrgUnit:
    """Move ``unit`` and its subtree under ``new_parent``.

    Locks the unit, its old and its new parent (id order), checks the whole tree (no cycle, kinds
    in order, Σ children ≤ the new parent, ceilings within it) and rewrites the subtree's paths in
    one UPDATE.
    """
    reason = require_reason(reason)
    lock_units([unit.pk, new_parent.pk] + ([unit.parent_id] if unit.parent_id else []))
    unit.refresh_from_db()
    new_parent.refresh_from_db()
    if unit.archived_at is not None or new_parent.archived_at is not None:
        raise InputError("parent", "archived units cannot be moved or receive units", "pick active units")
    if unit.parent_id == new_parent.pk:
        return unit
    problems = check_move(org_snapshot(), unit.pk, new_parent.pk)
    if problems:
        raise PolicyViolationError(problems)
    old_path, new_path = unit.path, f"{new_parent.path}/{unit.slug}"
    if OrgUnit.objects.filter(path=new_path, archived_at__isnull=True).exists():
        raise InputError("parent", f"{new_path} already exists", "rename the unit or pick another parent")
    before = _unit_state(unit)
    delta = new_parent.depth + 1 - unit.depth
    OrgUnit.objects.filter(archived_at__isnull=True, path__startswith=f"{old_path}/").update(
        path=Concat(Value(new_path), Substr("path", len(old_path) + 1)), depth=F("depth") + delta
    )
    unit.parent, unit.path, unit.depth = new_parent, new_path, new_parent.depth + 1
    unit.save(update_fields=["parent", "path", "depth"])
    audit_write(
        [
            audit_event(
                actor=actor,
                action="org_unit_move",
                obj_type="org_unit",
                obj_id=unit.pk,
                obj_repr=new_path,
                before=before,
                after=_unit_state(unit),
                reason=reason,
                unit_path=new_path,
            )
        ]
    )
    return unit


@transaction.atomic
def org_unit_archive(*, actor: Actor, reason: str, unit: OrgUnit) -> int:
    """Archive ``unit`` and its active subtree; their quotas stop counting and their namespaces are
    released. Locks the unit and its parent. Returns how many units were archived."""
    reason = require_reason(reason)
    lock_units([unit.pk] + ([unit.parent_id] if unit.parent_id else []))
    unit.refresh_from_db()
    if unit.archived_at is not None:
        return 0
    subtree = OrgUnit.objects.filter(Q(pk=unit.pk) | Q(path__startswith=f"{unit.path}/"), archived_at__isnull=True)
    ids = list(subtree.values_list("id", flat=True))
    bindings = NamespaceBinding.objects.filter(unit_id__in=ids)
    released = sorted(f"{c}/{n}" for c, n in bindings.values_list("cluster__name", "namespace"))
    bindings.delete()
    count = subtree.update(archived_at=timezone.now())
    audit_write(
        [
            audit_event(
                actor=actor,
                action="org_unit_archive",
                obj_type="org_unit",
                obj_id=unit.pk,
                obj_repr=unit.path,
                before={"archived": False},
                after={"archived": True, "units": count, "released_namespaces": released},
                reason=reason,
                unit_path=unit.path,
            )
        ]
    )
    return count


@transaction.atomic
def org_unit_unarchive(*, actor: Actor, reason: str, unit: OrgUnit) -> int:
    """Bring back ``unit`` and the units archived with it (same moment, below it), with their quotas,
    leads and members; namespaces released by the archive stay released (bind them again). Refused
    when its parent is archived, its path is taken by an active unit, or its quotas no longer fit
    the tree (the whole tree is checked after the change, and nothing is kept if it breaks).
    Returns how many units came back."""
    reason = require_reason(reason)
    lock_units([unit.pk] + ([unit.parent_id] if unit.parent_id else []))
    unit.refresh_from_db()
    if unit.archived_at is None:
        return 0
    if unit.parent is not None and unit.parent.archived_at is not None:
        raise InputError("parent", f"{unit.parent.path} is archived", "bring it back first")
    taken = OrgUnit.objects.filter(path=unit.path, archived_at__isnull=True).exists()
    if taken:
        raise InputError("unit", f"an active unit {unit.path} exists", "archive or rename it first")
    subtree = OrgUnit.objects.filter(Q(pk=unit.pk) | Q(path__startswith=f"{unit.path}/"), archived_at=unit.archived_at)
    count = subtree.update(archived_at=None)
    problems = validate_tree(org_snapshot())
    if problems:
        raise PolicyViolationError(problems)
    audit_write(
        [
            audit_event(
                actor=actor,
                action="org_unit_unarchive",
                obj_type="org_unit",
                obj_id=unit.pk,
                obj_repr=unit.path,
                before={"archived": True},
                after={"archived": False, "units": count},
                reason=reason,
                unit_path=unit.path,
            )
        ]
    )
    return count
