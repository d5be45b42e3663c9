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
from .invariants import QuotaView
from .quantity import Resource
from .snapshot import OrgSnapshot, Quota, QuotaKey


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
    edited together counted together: the invariants' own view of the edits, one pass over them).
    One entry per edited key, in the edits' order."""
    views = {False: QuotaView(snapshot, {}), True: QuotaView(snapshot, edits)}

    def room(parent: int | None, flavor: str, resource: Resource, *, edited: bool) -> tuple[int | None, int | None]:
        view = views[edited]
        if parent is None:
            capacity = reclaimable(snapshot, flavor, resource)
            given = sum(view.get(root, flavor, resource).guarantee for root in snapshot.roots())
            return capacity, None if capacity is None else capacity - given
        of = view.get(parent, flavor, resource).guarantee
        return of, of - view.children_guarantee(parent, flavor, resource)

    rooms = []
    for unit_id, flavor, resource in edits:
        parent = _parent(snapshot, unit_id)
        _, now = room(parent, flavor, resource, edited=False)
        of, after = room(parent, flavor, resource, edited=True)
        holder = "" if parent is None else snapshot.units[parent].path
        rooms.append(Room(unit_id, flavor, resource, holder, of, now, after))
    return rooms


def _parent(snapshot: OrgSnapshot, unit_id: int) -> int | None:
    unit = snapshot.units.get(unit_id)
    return None if unit is None else unit.parent_id
