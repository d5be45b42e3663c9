"""The most each ClusterQueue can ever admit, by Kueue's own quota arithmetic. Pure.

Kueue keeps part of each node's quota for the node itself: a ClusterQueue's or Cohort's
*guaranteed* quota is ``subtree quota − lendingLimit`` (0 without a lending limit), and only the rest is
stored in its parent for others. A Cohort's subtree quota is its own nominal quota plus what each child
stores in it. With no usage anywhere, a node can reach (Kueue's ``potentialAvailable``, hierarchical
Cohorts)::

    root:  subtree quota
    other: min(guaranteed + reach(parent), subtree quota + borrowingLimit)   # the limit when one is set

So the own queue of a unit with children (nominal 0, borrowing up to the unit's ceiling) can never take
its children's non-lendable guarantees, and a team can only borrow what its ancestors can reach. The
admission webhook and the portal show this figure beside the tree's ceiling (guarantee + burst, capped by
every ancestor's), so a job the webhook admits is one Kueue can admit (issue #39.5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from ..quantity import parse_decimal_quantity

Key = tuple[str, str, str]
"""(ClusterQueue name, flavor name, resource name)."""


class _Node:
    __slots__ = ("borrowing", "lending", "nominal", "parent")

    def __init__(self, parent: str | None) -> None:
        self.parent = parent
        self.nominal: dict[tuple[str, str], Decimal] = {}
        self.borrowing: dict[tuple[str, str], Decimal] = {}
        self.lending: dict[tuple[str, str], Decimal] = {}


def reachable(objects: Iterable[Mapping[str, Any]]) -> dict[Key, Decimal]:
    """Per ClusterQueue, flavor and resource it covers: the most it can admit with the rest of the tree idle."""
    nodes: dict[tuple[str, str], _Node] = {}
    for obj in objects:
        kind, spec = str(obj.get("kind")), obj.get("spec") or {}
        if kind == "Cohort":
            nodes[(kind, obj["metadata"]["name"])] = _node(spec, spec.get("parentName"))
        elif kind == "ClusterQueue":
            nodes[(kind, obj["metadata"]["name"])] = _node(spec, spec.get("cohortName") or spec.get("cohort"))
    for node in list(nodes.values()):
        parent = node.parent
        while parent is not None and ("Cohort", parent) not in nodes:  # named but not written: Kueue makes it empty
            nodes[("Cohort", parent)] = _Node(None)
            parent = None
    children: dict[str, list[tuple[str, str]]] = {}
    for key, node in nodes.items():
        if node.parent is not None:
            children.setdefault(node.parent, []).append(key)
    subtrees: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
    reaches: dict[tuple[tuple[str, str], tuple[str, str]], Decimal] = {}

    def subtree(key: tuple[str, str]) -> dict[tuple[str, str], Decimal]:
        if key not in subtrees:
            total = dict(nodes[key].nominal)
            for child in children.get(key[1], []) if key[0] == "Cohort" else []:
                for fr, quota in subtree(child).items():
                    total[fr] = total.get(fr, Decimal(0)) + quota - _guaranteed(nodes[child], fr, quota)
            subtrees[key] = total
        return subtrees[key]

    def reach(key: tuple[str, str], fr: tuple[str, str]) -> Decimal:
        if (key, fr) not in reaches:
            node, own = nodes[key], subtree(key).get(fr, Decimal(0))
            found = own
            if node.parent is not None:
                found = _guaranteed(node, fr, own) + reach(("Cohort", node.parent), fr)
                if fr in node.borrowing:
                    found = min(found, own + node.borrowing[fr])
            reaches[(key, fr)] = found
        return reaches[(key, fr)]

    return {
        (key[1], flavor, resource): reach(key, (flavor, resource))
        for key, node in sorted(nodes.items())
        if key[0] == "ClusterQueue"
        for flavor, resource in sorted(node.nominal)
    }


def _node(spec: Mapping[str, Any], parent: Any) -> _Node:
    node = _Node(str(parent) if parent else None)
    for group in spec.get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for entry in flavor.get("resources") or ():
                fr = (str(flavor["name"]), str(entry["name"]))
                node.nominal[fr] = parse_decimal_quantity(str(entry.get("nominalQuota", "0")))
                if entry.get("borrowingLimit") is not None:
                    node.borrowing[fr] = parse_decimal_quantity(str(entry["borrowingLimit"]))
                if entry.get("lendingLimit") is not None:
                    node.lending[fr] = parse_decimal_quantity(str(entry["lendingLimit"]))
    return node


def _guaranteed(node: _Node, fr: tuple[str, str], subtree: Decimal) -> Decimal:
    """What Kueue keeps for the node itself: its subtree quota beyond its lending limit."""
    return max(Decimal(0), subtree - node.lending[fr]) if fr in node.lending else Decimal(0)
