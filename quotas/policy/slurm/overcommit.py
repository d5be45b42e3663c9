"""Where permissive compiling lets a subtree hold more than its ceiling (Slurm's QOS limits do not nest). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from ..quantity import Resource
from ..snapshot import OrgSnapshot
from .model import SlurmState
from .slices import slices
from .translate import SlurmTarget


@dataclass(frozen=True, slots=True)
class Overcommit:
    """A subtree whose QOS, added up, let it hold more than its ceiling (permissive compiling)."""

    path: str
    gpu_type: str
    usable: int
    ceiling: int


def subtree_overcommit(snapshot: OrgSnapshot, state: SlurmState, target: SlurmTarget) -> list[Overcommit]:
    """Per unit and GPU type, what the guarantee and burst QOS of its subtree add up to, where that is
    more than the unit's ceiling, where that ceiling is below the flavor's physical devices (above,
    the subtree cannot exceed it). Empty for a strictly compiled state."""
    by_name = {q.name: q for q in state.qos}
    name = {uid: target.accounts.get(uid) or snapshot.units[uid].slug for uid in snapshot.units}
    accounts = {a.name for a in state.accounts}
    found = []
    for flavor, gres, weight in (
        (f, g, w) for f in sorted(target.flavors, key=lambda f: f.gpu_type) for g, w in f.types
    ):
        tres = f"gres/gpu:{gres}"
        own = {
            uid: sum(
                by_name[q].grp_tres.get(tres, 0)
                for q in (target.guar(name[uid]), target.burst(name[uid]))
                if q in by_name
            )
            for uid in snapshot.units
            if name[uid] in accounts
        }
        usable = dict(own)
        for uid in sorted(own, key=lambda u: -snapshot.units[u].path.count("/")):  # deepest first
            parent = snapshot.units[uid].parent_id
            if parent in usable:
                usable[parent] += usable[uid]
        for uid in sorted(own, key=lambda u: snapshot.units[u].path):
            equivalents = snapshot.quota(uid, flavor.key, Resource.GPU).ceiling
            physical = snapshot.flavors[flavor.key].physical_devices if flavor.key in snapshot.flavors else None
            ceiling = slices(equivalents, weight)
            if usable[uid] > ceiling and (physical is None or equivalents < physical):
                found.append(Overcommit(snapshot.units[uid].path, gres, usable[uid], ceiling))
    return found
