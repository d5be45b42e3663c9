"""The invariants of DESIGN.md, checked on a whole tree or incrementally for an edit.

Both paths share one mechanism: an edit (or a whole tree) touches a set of *constraints*, and each
constraint is evaluated by the same function. A quota edit on unit ``u`` touches only:

* ``own``  — u's own numbers (≥ 0, lendable ≤ guarantee, known flavor);
* ``sum``  — Σ of u's parent's children ≤ the parent's guarantee, and Σ of u's children ≤ u's;
* ``ceil`` — u's ceiling ≤ its parent's, and each child's ceiling ≤ u's;
* ``cap``  — when u is a root: Σ roots' guarantees ≤ reclaimable capacity of the flavor.

So an edit costs O(siblings + children), whatever the size of the tree. The tree's shape (kinds, weights, contracts,
cycles) is checked first, by ``structure``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from .capacity import reclaimable
from .contracts import check_contract, check_promises, check_tier_contract
from .quantity import Resource, format_quantity
from .snapshot import ZERO, OrgSnapshot, Quota, QuotaKey
from .structure import check_kind, check_structure
from .violations import Violation, ViolationCode

Constraint = tuple[str, object, object, object]


class QuotaView:
    """The snapshot's quotas with proposed edits laid over them."""

    __slots__ = ("_moved", "edits", "snapshot")

    def __init__(self, snapshot: OrgSnapshot, edits: Mapping[QuotaKey, Quota]) -> None:
        self.snapshot = snapshot
        self.edits = edits
        self._moved: dict[QuotaKey, int] | None = None

    def children_guarantee(self, parent_id: int, flavor: str, resource: Resource) -> int:
        """The sum of the children's guarantees with the edits applied: the snapshot's sum plus what
        the edits move (one pass over the edits, not over a thousand children per check)."""
        if self._moved is None:
            self._moved = {}
            units, quotas = self.snapshot.units, self.snapshot.quotas
            for (unit_id, f, r), quota in self.edits.items():
                unit = units.get(unit_id)
                if unit is not None and unit.parent_id is not None:
                    key = (unit.parent_id, f, r)
                    change = quota.guarantee - quotas.get((unit_id, f, r), ZERO).guarantee
                    self._moved[key] = self._moved.get(key, 0) + change
        key = (parent_id, flavor, resource)
        return self.snapshot.children_guarantee.get(key, 0) + self._moved.get(key, 0)

    def get(self, unit_id: int, flavor: str, resource: Resource) -> Quota:
        key = (unit_id, flavor, resource)
        found = self.edits.get(key)
        if found is not None:
            return found
        return self.snapshot.quotas.get(key, ZERO)


def validate_tree(snapshot: OrgSnapshot) -> list[Violation]:
    """Check every invariant on the whole snapshot. Returns violations sorted for display."""
    problems = check_structure(snapshot)
    problems += _evaluate(QuotaView(snapshot, {}), _failing_constraints(snapshot))
    problems += check_contracts(snapshot)
    problems += check_promises(snapshot)
    return _sorted(problems)


def _failing_constraints(snapshot: OrgSnapshot) -> list[Constraint]:
    """Every quota constraint of the tree, tested in one pass; only failing ones are returned, and
    :func:`_evaluate` turns them into violations with the same functions the incremental path uses
    (tests assert the two paths agree on every edit)."""
    quotas, units, flavors = snapshot.quotas, snapshot.units, snapshot.flavors
    failing: list[Constraint] = []
    sums: dict[QuotaKey, int] = {}
    for key, quota in quotas.items():
        unit_id, flavor, resource = key
        guarantee, burst, lendable = quota.guarantee, quota.burst, quota.lendable
        known = flavor in flavors
        if not known or guarantee < 0 or burst < 0 or lendable < 0 or lendable > guarantee:
            failing.append(("own", unit_id, flavor, resource))
        unit = units.get(unit_id)
        if not known or unit is None or unit.parent_id is None or unit.parent_id not in units:
            continue
        parent_key = (unit.parent_id, flavor, resource)
        sums[parent_key] = sums.get(parent_key, 0) + guarantee
        parent = quotas.get(parent_key, ZERO)
        if guarantee + burst > parent.guarantee + parent.burst:
            failing.append(("ceil", unit_id, flavor, resource))
    for (parent_id, flavor, resource), total in sums.items():
        if total > quotas.get((parent_id, flavor, resource), ZERO).guarantee:
            failing.append(("sum", parent_id, flavor, resource))
    failing.extend(("cap", None, flavor, resource) for flavor in flavors for resource in Resource)
    return failing


def check_quota_edits(snapshot: OrgSnapshot, edits: Mapping[QuotaKey, Quota]) -> list[Violation]:
    """Check only the constraints the edits touch, against the snapshot with the edits applied.

    ``snapshot`` needs to hold the edited units, their parents, siblings and children (and every
    root when a root is edited); a neighbourhood snapshot is enough.
    """
    problems: list[Violation] = []
    constraints: set[Constraint] = set()
    for key in edits:
        if key[0] not in snapshot.units:
            problems.append(
                Violation(
                    ViolationCode.UNKNOWN_UNIT,
                    f"unit #{key[0]} does not exist or is archived",
                    "pick an active unit",
                    field="unit",
                )
            )
            continue
        constraints.update(_touched_by(snapshot, key, as_parent=True))
    problems += _evaluate(QuotaView(snapshot, edits), constraints)
    return _sorted(problems)


def check_move(snapshot: OrgSnapshot, unit_id: int, new_parent_id: int) -> list[Violation]:
    """Check moving ``unit_id`` (with its subtree) under ``new_parent_id``; needs a complete snapshot."""
    unit = snapshot.units[unit_id]
    parent = snapshot.units.get(new_parent_id)
    if parent is None:
        return [
            Violation(
                ViolationCode.UNKNOWN_UNIT,
                f"unit #{new_parent_id} does not exist or is archived",
                "pick an active unit as the new parent",
                field="parent",
            )
        ]
    if new_parent_id == unit_id or unit_id in snapshot.ancestors(new_parent_id):
        return [
            Violation(
                ViolationCode.CYCLE,
                f"{unit.path} cannot move under {parent.path}: that is inside its own subtree",
                "pick a parent outside the unit's subtree",
                unit=unit.path,
                field="parent",
            )
        ]
    old_path, new_path = unit.path, f"{parent.path}/{unit.slug}"
    units = {**snapshot.units, unit_id: replace(unit, parent_id=new_parent_id, path=new_path)}
    for uid, u in snapshot.units.items():  # the subtree's paths, so what is reported names them as they will be
        if u.path.startswith(f"{old_path}/"):
            units[uid] = replace(u, path=new_path + u.path[len(old_path) :])
    moved = replace(snapshot, units=units)
    problems = check_kind(moved, units[unit_id])
    constraints: set[Constraint] = set()
    for key in moved.quota_keys_by_unit.get(unit_id, ()):
        constraints.update(_touched_by(moved, key, as_parent=False))
    return _sorted(problems + _evaluate(QuotaView(moved, {}), constraints) + _promises_broken_by(snapshot, moved))


def _promises_broken_by(before: OrgSnapshot, after: OrgSnapshot) -> list[Violation]:
    """Contract promises broken in ``after`` that were not (or less) in ``before``: a move changes the
    contract its subtree inherits and whose units it can borrow from or lend to, so it can break the
    promise an owner made (:func:`check_promises`) like a contract change does."""
    was = {(v.unit, v.flavor): v.actual or 0 for v in check_promises(before)}
    return [v for v in check_promises(after) if (v.actual or 0) > was.get((v.unit, v.flavor), -1)]


def _touched_by(snapshot: OrgSnapshot, key: QuotaKey, *, as_parent: bool) -> list[Constraint]:
    unit_id, flavor, resource = key
    unit = snapshot.units.get(unit_id)
    found: list[Constraint] = [("own", unit_id, flavor, resource)]
    if unit is None:
        return found
    if unit.parent_id is None:
        found.append(("cap", None, flavor, resource))
    elif unit.parent_id in snapshot.units:
        found.append(("sum", unit.parent_id, flavor, resource))
        found.append(("ceil", unit_id, flavor, resource))
    if as_parent:
        children = snapshot.children.get(unit_id, ())
        if children:
            found.append(("sum", unit_id, flavor, resource))
            found.extend(("ceil", child, flavor, resource) for child in children)
    return found


def _evaluate(view: QuotaView, constraints: Iterable[Constraint]) -> list[Violation]:
    problems: list[Violation] = []
    for kind, unit_id, flavor, resource in constraints:
        assert isinstance(flavor, str) and isinstance(resource, Resource)
        if kind == "own":
            assert isinstance(unit_id, int)
            problems += _check_own(view, unit_id, flavor, resource)
        elif flavor not in view.snapshot.flavors:
            continue  # reported once by "own"
        elif kind == "sum":
            assert isinstance(unit_id, int)
            problems += _check_children_sum(view, unit_id, flavor, resource)
        elif kind == "ceil":
            assert isinstance(unit_id, int)
            problems += _check_ceiling(view, unit_id, flavor, resource)
        else:
            problems += _check_capacity(view, flavor, resource)
    return problems


def _fmt(resource: Resource, value: int) -> str:
    return format_quantity(resource, value)


def _check_own(view: QuotaView, unit_id: int, flavor: str, resource: Resource) -> list[Violation]:
    quota = view.get(unit_id, flavor, resource)
    path = view.snapshot.path(unit_id)
    if flavor not in view.snapshot.flavors:
        known = ", ".join(sorted(view.snapshot.flavors)) or "none yet"
        return [
            Violation(
                ViolationCode.UNKNOWN_FLAVOR,
                f"{path}: unknown flavor {flavor!r}",
                f"use one of: {known}",
                field="flavor",
                unit=path,
                flavor=flavor,
                resource=resource.value,
            )
        ]
    problems = []
    for name in ("guarantee", "burst", "lendable"):
        value = getattr(quota, name)
        if value < 0:
            problems.append(
                Violation(
                    ViolationCode.NEGATIVE,
                    f"{path} {flavor} {resource}: {name} is negative ({value})",
                    f"set {name} to 0 or more",
                    field=name,
                    limit=0,
                    actual=value,
                    unit=path,
                    flavor=flavor,
                    resource=resource.value,
                )
            )
    if quota.lendable > quota.guarantee:
        problems.append(
            Violation(
                ViolationCode.LENDABLE_ABOVE_GUARANTEE,
                f"{path} {flavor} {resource}: lendable {_fmt(resource, quota.lendable)} is above the "
                f"guarantee {_fmt(resource, quota.guarantee)}",
                f"lower lendable to at most {_fmt(resource, quota.guarantee)}: only guaranteed capacity can be lent",
                field="lendable",
                limit=quota.guarantee,
                actual=quota.lendable,
                unit=path,
                flavor=flavor,
                resource=resource.value,
            )
        )
    return problems


def _check_children_sum(view: QuotaView, parent_id: int, flavor: str, resource: Resource) -> list[Violation]:
    total = view.children_guarantee(parent_id, flavor, resource)
    limit = view.get(parent_id, flavor, resource).guarantee
    if total <= limit:
        return []
    path = view.snapshot.path(parent_id)
    over = total - limit
    return [
        Violation(
            ViolationCode.CHILDREN_EXCEED_GUARANTEE,
            f"{path} {flavor} {resource}: its children's guarantees add up to {_fmt(resource, total)}, "
            f"above its own guarantee of {_fmt(resource, limit)}",
            f"lower the children's guarantees by {_fmt(resource, over)} in total, or raise {path}'s "
            f"guarantee to {_fmt(resource, total)} (a change request if that is above your envelope)",
            unit=path,
            flavor=flavor,
            resource=resource.value,
            field="guarantee",
            limit=limit,
            actual=total,
        )
    ]


def _check_ceiling(view: QuotaView, unit_id: int, flavor: str, resource: Resource) -> list[Violation]:
    parent_id = view.snapshot.units[unit_id].parent_id
    assert parent_id is not None
    ceiling = view.get(unit_id, flavor, resource).ceiling
    limit = view.get(parent_id, flavor, resource).ceiling
    if ceiling <= limit:
        return []
    path = view.snapshot.path(unit_id)
    return [
        Violation(
            ViolationCode.CEILING_ABOVE_PARENT,
            f"{path} {flavor} {resource}: ceiling (guarantee + burst) {_fmt(resource, ceiling)} is above "
            f"{view.snapshot.path(parent_id)}'s ceiling of {_fmt(resource, limit)}",
            f"lower burst or guarantee by {_fmt(resource, ceiling - limit)}: a unit can never get more than its parent",
            unit=path,
            flavor=flavor,
            resource=resource.value,
            field="burst",
            limit=limit,
            actual=ceiling,
        )
    ]


def _check_capacity(view: QuotaView, flavor: str, resource: Resource) -> list[Violation]:
    limit = reclaimable(view.snapshot, flavor, resource)
    if limit is None:
        return []
    total = sum(view.get(root, flavor, resource).guarantee for root in view.snapshot.roots())
    if limit < 0:
        spec = view.snapshot.flavors[flavor]
        return [
            Violation(
                ViolationCode.RESERVATIONS_EXCEED_CAPACITY,
                f"{flavor}: reservations and headroom hold back more than its {spec.physical_devices} devices",
                f"lower reservations or headroom by {-limit} devices",
                flavor=flavor,
                resource=resource.value,
                field="devices",
                limit=spec.physical_devices,
                actual=spec.physical_devices - limit,
            )
        ]
    if total <= limit:
        return []
    return [
        Violation(
            ViolationCode.GUARANTEES_EXCEED_CAPACITY,
            f"{flavor} {resource}: top-level guarantees add up to {_fmt(resource, total)}, above the "
            f"reclaimable capacity of {_fmt(resource, limit)} (physical − reservations − headroom)",
            f"lower top-level guarantees by {_fmt(resource, total - limit)}; burst may exceed capacity, "
            f"guarantees may not",
            flavor=flavor,
            resource=resource.value,
            field="guarantee",
            limit=limit,
            actual=total,
        )
    ]


def check_flavor_capacity(snapshot: OrgSnapshot, flavor: str) -> list[Violation]:
    """Σ of the roots' guarantees on ``flavor`` against its reclaimable capacity, per resource."""
    return _sorted(_evaluate(QuotaView(snapshot, {}), [("cap", None, flavor, r) for r in Resource]))


def check_contracts(snapshot: OrgSnapshot) -> list[Violation]:
    """Every contract feasible; every tier consistent with each contract that units use."""
    problems: list[Violation] = []
    used = {unit.contract for unit in snapshot.units.values() if unit.contract}
    for name in sorted(snapshot.contracts):
        contract = snapshot.contracts[name]
        problems += check_contract(contract, snapshot.scheduling_pass_s)
        if name in used:
            for tier_name in sorted(snapshot.tiers):
                problems += check_tier_contract(snapshot.tiers[tier_name], contract)
    return _sorted(problems)


def _sorted(problems: list[Violation]) -> list[Violation]:
    unique = {(p.code, p.unit, p.flavor, p.resource, p.field, p.message): p for p in problems}
    return sorted(unique.values(), key=lambda p: (p.unit or "", p.flavor or "", p.resource or "", p.code))
