"""Room left for guarantees: what an approver wants beside a change — how much of the level above's
guarantee its units have not yet been given, now and once the change is applied.

For a unit with a parent the room is the parent's guarantee minus the sum of its children's (the
children-sum invariant keeps it at or above 0); for a top-level unit it is the flavor's reclaimable
capacity (physical − reservations − headroom) minus the top-level guarantees. Pure: reads a snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .capacity import reclaimable
from .quantity import Resource
from .snapshot import ZERO, OrgSnapshot, Quota, QuotaKey


@dataclass(frozen=True)
class Room:
    """The room under one holder (a parent unit, or a flavor's capacity) for one flavor and resource."""

    unit_id: int
    flavor: str
    resource: Resource
    holder: str
    """The parent's path, or "" for the flavor's reclaimable capacity."""
    of: int | None
    """The holder's guarantee (or the capacity) after the change; None: capacity unknown."""
    now: int | None
    after: int | None


def guarantee_room(snapshot: OrgSnapshot, edits: Mapping[QuotaKey, Quota]) -> list[Room]:
    """For every edited key, the room under its holder now and with every edit applied (siblings
    edited together counted together). One entry per edited key, in the edits' order."""

    def quota(key: QuotaKey, *, edited: bool) -> Quota:
        return edits.get(key, snapshot.quotas.get(key, ZERO)) if edited else snapshot.quotas.get(key, ZERO)

    def given(parent: int | None, flavor: str, resource: Resource, *, edited: bool) -> int:
        if parent is not None and not edited:
            return snapshot.children_guarantee.get((parent, flavor, resource), 0)
        if parent is not None:
            moved = sum(
                q.guarantee - snapshot.quotas.get(k, ZERO).guarantee
                for k, q in edits.items()
                if k[1:] == (flavor, resource) and _parent(snapshot, k[0]) == parent
            )
            return snapshot.children_guarantee.get((parent, flavor, resource), 0) + moved
        return sum(quota((root, flavor, resource), edited=edited).guarantee for root in snapshot.roots())

    rooms = []
    for unit_id, flavor, resource in edits:
        parent = _parent(snapshot, unit_id)
        if parent is None:
            capacity = reclaimable(snapshot, flavor, resource)
            holder, before_of, after_of = "", capacity, capacity
        else:
            holder = snapshot.units[parent].path
            before_of = quota((parent, flavor, resource), edited=False).guarantee
            after_of = quota((parent, flavor, resource), edited=True).guarantee
        now = None if before_of is None else before_of - given(parent, flavor, resource, edited=False)
        after = None if after_of is None else after_of - given(parent, flavor, resource, edited=True)
        rooms.append(Room(unit_id, flavor, resource, holder, after_of, now, after))
    return rooms


def _parent(snapshot: OrgSnapshot, unit_id: int) -> int | None:
    unit = snapshot.units.get(unit_id)
    return None if unit is None else unit.parent_id
