"""Setting quotas: one or many in one transaction, validated by the core, audited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from django.db import transaction
from django.utils import timezone

from quotas.errors import InputError, StaleVersionError
from quotas.models import OrgUnit, Quota
from quotas.policy import snapshot as snap
from quotas.policy.contracts import check_promises
from quotas.policy.invariants import check_quota_edits
from quotas.policy.quantity import Resource
from quotas.policy.violations import PolicyViolationError, Violation
from quotas.selectors import flavor_keys, neighbourhood_snapshot, org_snapshot

from .audit import Actor, audit_event, audit_write, require_reason
from .locks import lock_flavors, lock_units

_LOCK_RETRIES = 3


@dataclass(frozen=True, slots=True)
class QuotaChange:
    """One requested quota. ``None`` keeps the current value (0 for a new quota)."""

    unit_id: int
    flavor_id: int
    resource: Resource
    guarantee: int | None = None
    burst: int | None = None
    lendable: int | None = None
    expected_version: int | None = None
    """The version the caller edited (If-Match); a different current version is refused."""

    @property
    def key(self) -> tuple[int, int, Resource]:
        return (self.unit_id, self.flavor_id, self.resource)


def quota_set(
    *,
    actor: Actor,
    reason: str,
    unit_id: int,
    flavor_id: int,
    resource: Resource,
    guarantee: int | None = None,
    burst: int | None = None,
    lendable: int | None = None,
    expected_version: int | None = None,
) -> Quota:
    """Set one quota; see :func:`quota_set_bulk`."""
    change = QuotaChange(unit_id, flavor_id, Resource(resource), guarantee, burst, lendable, expected_version)
    return quota_set_bulk(actor=actor, reason=reason, changes=[change])[0]


@transaction.atomic
def quota_set_bulk(*, actor: Actor, reason: str, changes: Sequence[QuotaChange]) -> list[Quota]:
    """Apply all ``changes`` or none.

    Concurrency: locks every edited unit and its parent (and, when a root is edited, the flavor
    rows, which every root edit and capacity change also lock) in one fixed order, then reads the
    neighbourhood and checks the invariants. Two transactions raising sibling guarantees both need
    the parent's lock, so the second one sees the first one's committed guarantee and is refused
    if together they would exceed the parent. (Chosen over SERIALIZABLE + retry: the lock set is
    small and known up front, and a refusal then names the real numbers instead of a retry error.)

    Changes whose values equal the current ones write nothing and leave no audit row, so a double
    submit is harmless.

    Raises:
        InputError: no reason, no changes, a duplicate, an unknown or archived unit or flavor.
        StaleVersionError: ``expected_version`` is not the current version.
        PolicyViolationError: the result would break an invariant (the violations list says how).
    """
    reason = require_reason(reason)
    if not changes:
        raise InputError("changes", "no quota changes given", "send at least one change")
    if len({c.key for c in changes}) != len(changes):
        raise InputError("changes", "the same unit, flavor and resource appears twice", "send each quota once")
    keys = flavor_keys()
    for change in changes:
        if change.flavor_id not in keys:
            raise InputError("flavor", f"flavor #{change.flavor_id} does not exist", "pick an existing flavor")
    units = _lock_edited_units({c.unit_id for c in changes})
    roots = {uid for uid, parent in units.items() if parent is None}
    if roots:
        lock_flavors({c.flavor_id for c in changes if c.unit_id in roots})
    snapshot = neighbourhood_snapshot(units)
    existing = {
        (q.unit_id, q.flavor_id, Resource(q.resource)): q
        for q in Quota.objects.filter(unit_id__in=units, flavor_id__in={c.flavor_id for c in changes})
    }
    plan = [(change, existing.get(change.key)) for change in changes]
    edits = {}
    for change, row in plan:
        _check_version(change, row, snapshot)
        edits[(change.unit_id, keys[change.flavor_id], change.resource)] = proposed_quota(change, row)
    violations = check_quota_edits(snapshot, edits) or _broken_promises(snapshot, edits)
    if violations:
        raise PolicyViolationError(violations)
    return _write(actor, reason, snapshot, keys, plan, edits)


def _broken_promises(near: snap.OrgSnapshot, edits: dict[snap.QuotaKey, snap.Quota]) -> list[Violation]:
    """Contract promises the edits would break (:func:`check_promises`), leaving alone those broken
    already. Only an edit that makes a unit a borrower (burst from 0) or a lender (lendable, or on a
    Slurm flavor a guarantee, from 0) can break one, and only then is the whole tree read."""
    if not any(
        key[2] is Resource.GPU
        and any(getattr(q, f) > 0 and getattr(near.quota(*key), f) == 0 for f in ("burst", "lendable", "guarantee"))
        for key, q in edits.items()
    ):
        return []
    whole = org_snapshot()
    before = {(v.unit, v.flavor): v.actual or 0 for v in check_promises(whole)}
    after = check_promises(replace(whole, quotas=MappingProxyType({**whole.quotas, **edits})))
    return [v for v in after if (v.unit, v.flavor) not in before or (v.actual or 0) > before[(v.unit, v.flavor)]]


def _lock_edited_units(unit_ids: set[int]) -> dict[int, int | None]:
    """Lock the units and their parents; return unit id → parent id as read under the lock."""
    for _ in range(_LOCK_RETRIES):
        parents: dict[int, int | None] = dict(
            OrgUnit.objects.filter(id__in=unit_ids, archived_at__isnull=True).values_list("id", "parent_id")
        )
        missing = unit_ids - parents.keys()
        if missing:
            raise InputError("unit", f"unit #{min(missing)} does not exist or is archived", "pick an active unit")
        lock_units(unit_ids | {p for p in parents.values() if p is not None})
        again = dict(OrgUnit.objects.filter(id__in=unit_ids, archived_at__isnull=True).values_list("id", "parent_id"))
        if again == parents:
            return parents
    raise InputError("unit", "the units are being moved right now", "try again in a moment")


def proposed_quota(change: QuotaChange, row: Quota | snap.Quota | None) -> snap.Quota:
    """The quota a change asks for: its values where given, the current ones (or 0) elsewhere."""

    def pick(new: int | None, old: int) -> int:
        return old if new is None else new

    return snap.Quota(
        pick(change.guarantee, row.guarantee if row else 0),
        pick(change.burst, row.burst if row else 0),
        pick(change.lendable, row.lendable if row else 0),
    )


def _check_version(change: QuotaChange, row: Quota | None, snapshot: snap.OrgSnapshot) -> None:
    if change.expected_version is None:
        return
    current = row.version if row else 0
    if change.expected_version != current:
        raise StaleVersionError(
            f"quota of {snapshot.path(change.unit_id)} on flavor #{change.flavor_id} {change.resource}",
            change.expected_version,
            _row_dict(row) if row else {"version": 0},
        )


def _row_dict(row: Quota) -> dict[str, object]:
    return {"guarantee": row.guarantee, "burst": row.burst, "lendable": row.lendable, "version": row.version}


def _write(
    actor: Actor,
    reason: str,
    snapshot: snap.OrgSnapshot,
    keys: dict[int, str],
    plan: list[tuple[QuotaChange, Quota | None]],
    edits: dict[snap.QuotaKey, snap.Quota],
) -> list[Quota]:
    to_update, to_create, events, result = [], [], [], []
    now = timezone.now()
    for change, row in plan:
        flavor_key = keys[change.flavor_id]
        new = edits[(change.unit_id, flavor_key, change.resource)]
        before = _row_dict(row) if row else None
        if row is not None and (row.guarantee, row.burst, row.lendable) == (new.guarantee, new.burst, new.lendable):
            result.append(row)
            continue
        if row is None:
            row = Quota(
                unit_id=change.unit_id,
                flavor_id=change.flavor_id,
                resource=change.resource.value,
                guarantee=new.guarantee,
                burst=new.burst,
                lendable=new.lendable,
                version=1,
            )
            to_create.append(row)
        else:
            row.guarantee, row.burst, row.lendable = new.guarantee, new.burst, new.lendable
            row.version += 1
            row.updated_at = now  # bulk_update does not run auto_now
            to_update.append(row)
        result.append(row)
        path = snapshot.path(change.unit_id)
        events.append(
            (
                row,
                audit_event(
                    actor=actor,
                    action="quota_set",
                    obj_type="quota",
                    obj_id="",
                    reason=reason,
                    unit_path=path,
                    obj_repr=f"{path} {flavor_key} {change.resource.value}",
                    before=before,
                    after={
                        "guarantee": new.guarantee,
                        "burst": new.burst,
                        "lendable": new.lendable,
                        "version": row.version,
                    },
                ),
            )
        )
    Quota.objects.bulk_update(to_update, ["guarantee", "burst", "lendable", "version", "updated_at"])
    Quota.objects.bulk_create(to_create)
    if any(row.pk is None for row in to_create):  # backends without RETURNING ids
        ids = {
            (q.unit_id, q.flavor_id, q.resource): q.pk
            for q in Quota.objects.filter(unit_id__in={r.unit_id for r in to_create})
        }
        for row in to_create:
            row.pk = ids[(row.unit_id, row.flavor_id, row.resource)]
    for row, event in events:
        event.object_id = str(row.pk)
    audit_write([event for _, event in events])
    return result


def quota_edit(*, actor: Actor, reason: str, changes: Sequence[QuotaChange]) -> list[Quota]:
    """A person's quota edit, from the portal or the API: :func:`quota_set_bulk` for units the actor
    may set directly (see :mod:`quotas.access`). Raises NotAllowedError naming the unit otherwise."""
    from quotas.access import NotAllowedError, led_paths, may_set_directly

    led = led_paths(actor)
    for unit in OrgUnit.objects.filter(pk__in={c.unit_id for c in changes}).order_by("path"):
        if not may_set_directly(actor, unit, led):
            raise NotAllowedError(
                f"you may not set {unit.path}'s quota directly: ask for it with a change request "
                f"(a lead of a unit above it, or a platform admin, decides)"
            )
    return quota_set_bulk(actor=actor, reason=reason, changes=changes)
