"""The tree's shape: organisations are roots, kinds go down, weights are positive, contracts exist, no unit is
its own ancestor (the quota invariants are ``invariants``; this is the part they check before any number)."""

from __future__ import annotations

from .snapshot import OrgSnapshot, Unit, UnitKind
from .violations import Violation, ViolationCode


def check_structure(snapshot: OrgSnapshot) -> list[Violation]:
    """Kinds in order, positive weights, known contracts and (on a whole tree) no unit its own ancestor."""
    problems: list[Violation] = []
    for unit in snapshot.units.values():
        problems += check_kind(snapshot, unit)
        if not unit.weight > 0:
            problems.append(
                Violation(
                    ViolationCode.BAD_WEIGHT,
                    f"{unit.path}: fair-share weight must be positive",
                    "set a weight above 0, e.g. 1",
                    unit=unit.path,
                    field="weight",
                )
            )
        if unit.contract is not None and unit.contract not in snapshot.contracts:
            problems.append(
                Violation(
                    ViolationCode.UNKNOWN_CONTRACT,
                    f"{unit.path}: unknown contract {unit.contract!r}",
                    "pick an existing contract or none to inherit",
                    unit=unit.path,
                    field="contract",
                )
            )
    if snapshot.complete:
        problems += _cycles(snapshot)
    return problems


def check_kind(snapshot: OrgSnapshot, unit: Unit) -> list[Violation]:
    """Where ``unit`` sits against its parent's kind (nothing when the parent is outside the snapshot)."""
    if unit.parent_id is not None and unit.parent_id not in snapshot.units:
        return []  # parent outside a neighbourhood snapshot
    parent = snapshot.units[unit.parent_id] if unit.parent_id is not None else None
    return check_placement(unit.path, unit.kind, parent.kind if parent else None)


def check_placement(path: str, kind: UnitKind, parent_kind: UnitKind | None) -> list[Violation]:
    """Organisations are roots; below them kinds never go back up (departments and projects nest)."""
    if parent_kind is None and kind is not UnitKind.ORGANISATION:
        return [
            Violation(
                ViolationCode.KIND_ORDER,
                f"{path}: a top-level unit must be an organisation",
                "choose a parent for it, or make it an organisation",
                unit=path,
                field="parent",
            )
        ]
    if parent_kind is not None and (kind is UnitKind.ORGANISATION or kind.rank < parent_kind.rank):
        return [
            Violation(
                ViolationCode.KIND_ORDER,
                f"{path}: a {kind} cannot sit under a {parent_kind}",
                "the tree goes organisation → department → team → project (departments and projects may nest)",
                unit=path,
                field="kind",
            )
        ]
    return []


def _cycles(snapshot: OrgSnapshot) -> list[Violation]:
    state: dict[int, int] = {}
    problems = []
    for start in snapshot.units:
        trail: list[int] = []
        node: int | None = start
        while node is not None and node in snapshot.units and state.get(node) is None:
            state[node] = 1
            trail.append(node)
            node = snapshot.units[node].parent_id
        if node is not None and state.get(node) == 1:
            path = snapshot.path(node)
            problems.append(
                Violation(
                    ViolationCode.CYCLE,
                    f"{path} is its own ancestor",
                    "move one unit of the loop under a unit outside it",
                    unit=path,
                    field="parent",
                )
            )
        for done in trail:
            state[done] = 2
    return problems
