"""Capacity arithmetic: reclaimable capacity per flavor and effective ceilings per unit."""

from __future__ import annotations

from dataclasses import dataclass

from .quantity import Resource
from .snapshot import OrgSnapshot


@dataclass(frozen=True, slots=True)
class CapacityLine:
    """Devices of one flavor: what exists, what is held back, what is promised, what is left."""

    flavor: str
    physical: int
    reserved: int
    headroom: int
    promised: int

    @property
    def reclaimable(self) -> int:
        return self.physical - self.reserved - self.headroom

    @property
    def left_to_promise(self) -> int:
        return self.reclaimable - self.promised


def reclaimable(snapshot: OrgSnapshot, flavor: str, resource: Resource) -> int | None:
    """Capacity the platform may promise concurrently: physical − reservations − headroom.

    Reservations and headroom are counted in devices and apply to the GPU resource only; CPU and
    memory are checked against the pool's declared capacity when the flavor declares one.
    Returns ``None`` when the flavor declares no capacity for ``resource``.
    """
    spec = snapshot.flavors[flavor]
    physical = spec.physical(resource)
    if physical is None:
        return None
    if resource is not Resource.GPU:
        return physical
    return physical - snapshot.reserved_devices.get(flavor, 0) - spec.headroom_devices


def capacity_report(snapshot: OrgSnapshot) -> list[CapacityLine]:
    """One line per flavor, sorted by key; ``promised`` is Σ of the roots' GPU guarantees."""
    roots = snapshot.roots()
    lines = []
    for key in sorted(snapshot.flavors):
        spec = snapshot.flavors[key]
        promised = sum(snapshot.quota(root, key, Resource.GPU).guarantee for root in roots)
        lines.append(
            CapacityLine(
                key, spec.physical_devices, snapshot.reserved_devices.get(key, 0), spec.headroom_devices, promised
            )
        )
    return lines


def effective_ceiling(snapshot: OrgSnapshot, unit_id: int, flavor: str, resource: Resource) -> int:
    """The most a unit can ever hold: the smallest ceiling (guarantee + burst) on its path to the
    root, and never more than the flavor's physical capacity."""
    ceiling = min(snapshot.quota(uid, flavor, resource).ceiling for uid in [unit_id, *snapshot.ancestors(unit_id)])
    physical = snapshot.flavors[flavor].physical(resource) if flavor in snapshot.flavors else None
    return ceiling if physical is None else min(ceiling, physical)


def effective_ceilings(snapshot: OrgSnapshot) -> dict[tuple[int, str, Resource], int]:
    """Effective ceiling for every unit × flavor × resource that has a quota, top-down in one pass."""
    result: dict[tuple[int, str, Resource], int] = {}
    pending: list[int | None] = [None]
    while pending:
        parent = pending.pop()
        for uid in snapshot.children.get(parent, ()):
            for key in snapshot.quota_keys_by_unit.get(uid, ()):
                _, flavor, resource = key
                own = snapshot.quotas[key].ceiling
                if parent is None:
                    physical = snapshot.flavors[flavor].physical(resource) if flavor in snapshot.flavors else None
                    bound = own if physical is None else min(own, physical)
                else:
                    bound = min(own, result.get((parent, flavor, resource), 0))
                result[key] = bound
            pending.append(uid)
    return result
