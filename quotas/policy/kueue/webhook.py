"""Rules Kueue's validating webhook enforces but the CRD does not (kueue-notes.md §1.1, §2).

Checked over the whole object set, because some rules span objects (cohort cycles, references).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

from ..quantity import parse_decimal_quantity
from .problems import ObjectProblem, Source

MAX_FLAVORS, MAX_RESOURCES, MAX_COMBINATIONS = 256, 256, 512


def check_webhook_rules(
    objects: Sequence[Mapping[str, Any]], *, written: Collection[tuple[str, str, str]] | None = None
) -> list[ObjectProblem]:
    """Every rule over ``objects``; with ``written`` (the keys a sync would write), the per-object rules only
    for those — an unchanged object is one Kueue's webhook accepted — and the cross-object ones (references,
    cohort cycles) over the whole set."""
    found: list[ObjectProblem] = []
    names = {(o.get("kind"), o["metadata"]["name"]) for o in objects}
    for obj in objects:
        kind, name = obj.get("kind", ""), obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace", "")
        if written is not None and (kind, namespace, name) not in written:
            continue

        def report(field: str, message: str, kind: str = kind, name: str = name, namespace: str = namespace) -> None:
            found.append(ObjectProblem(kind, name, field, message, Source.WEBHOOK, namespace))

        spec = obj.get("spec") or {}
        if kind == "ClusterQueue":
            _groups(
                spec,
                report,
                limits_allowed=bool(spec.get("cohortName")),
                parent_word="cohort",
                lending_within_nominal=True,
            )
            _weight(spec, report)
            for gi, group in enumerate(spec.get("resourceGroups", [])):
                for fi, flavor in enumerate(group.get("flavors", [])):
                    if ("ResourceFlavor", flavor.get("name")) not in names:
                        report(
                            f"spec.resourceGroups[{gi}].flavors[{fi}].name",
                            f"ResourceFlavor {flavor.get('name')!r} is not among the objects applied",
                        )
        elif kind == "Cohort":
            _groups(
                spec,
                report,
                limits_allowed=bool(spec.get("parentName")),
                parent_word="parent",
                lending_within_nominal=False,
            )
            _weight(spec, report)
        elif kind == "LocalQueue" and ("ClusterQueue", spec.get("clusterQueue")) not in names:
            report("spec.clusterQueue", f"ClusterQueue {spec.get('clusterQueue')!r} is not among the objects applied")
    found += _cohort_cycles(objects)
    return found


@lru_cache(maxsize=4096)
def _parsed(text: str) -> Decimal | None:
    try:
        return parse_decimal_quantity(text)
    except ValueError:
        return None


def _quantity(value: Any) -> Decimal | None:
    return _parsed(str(value))


def _groups(
    spec: Mapping[str, Any], report: Any, *, limits_allowed: bool, parent_word: str, lending_within_nominal: bool
) -> None:
    seen_flavors: set[str] = set()
    seen_resources: set[str] = set()
    groups = spec.get("resourceGroups", [])
    for gi, group in enumerate(groups):
        covered = list(group.get("coveredResources", []))
        for resource in covered:
            if resource in seen_resources:
                report(f"spec.resourceGroups[{gi}].coveredResources", f"Duplicate value: {resource!r} in two groups")
            seen_resources.add(resource)
        flavors = group.get("flavors", [])
        if len(flavors) * len(covered) > MAX_COMBINATIONS:
            report(f"spec.resourceGroups[{gi}]", f"more than {MAX_COMBINATIONS} flavor × resource combinations")
        for fi, flavor in enumerate(flavors):
            where = f"spec.resourceGroups[{gi}].flavors[{fi}]"
            if flavor.get("name") in seen_flavors:
                report(f"{where}.name", f"Duplicate value: flavor {flavor.get('name')!r} in two groups")
            seen_flavors.add(flavor.get("name", ""))
            for ri, entry in enumerate(flavor.get("resources", [])):
                _resource(
                    entry,
                    f"{where}.resources[{ri}]",
                    covered,
                    ri,
                    report,
                    limits_allowed=limits_allowed,
                    parent_word=parent_word,
                    lending_within_nominal=lending_within_nominal,
                )
    if len(seen_flavors) > MAX_FLAVORS:
        report("spec.resourceGroups", f"more than {MAX_FLAVORS} flavors in total")
    if len(seen_resources) > MAX_RESOURCES:
        report("spec.resourceGroups", f"more than {MAX_RESOURCES} resources in total")


def _resource(
    entry: Mapping[str, Any],
    where: str,
    covered: list[str],
    index: int,
    report: Any,
    *,
    limits_allowed: bool,
    parent_word: str,
    lending_within_nominal: bool,
) -> None:
    if index < len(covered) and entry.get("name") != covered[index]:
        report(
            f"{where}.name",
            f"Invalid value: {entry.get('name')!r}: must match the name in coveredResources "
            f"({covered[index]!r}, same order)",
        )
    values = {}
    for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
        if field in entry:
            amount = _quantity(entry[field])
            if amount is None or amount < 0:
                report(f"{where}.{field}", f"Invalid value: {entry[field]!r}: must be a non-negative quantity")
            values[field] = amount
    for field in ("borrowingLimit", "lendingLimit"):
        if field in entry and not limits_allowed:
            report(f"{where}.{field}", f"must be nil when {parent_word} is empty")
    nominal, lending = values.get("nominalQuota"), values.get("lendingLimit")
    if lending_within_nominal and nominal is not None and lending is not None and lending > nominal:
        report(f"{where}.lendingLimit", "must be less than or equal to the nominalQuota")


def _weight(spec: Mapping[str, Any], report: Any) -> None:
    raw = (spec.get("fairSharing") or {}).get("weight")
    if raw is None:
        return
    weight = _quantity(raw)
    if weight is None or weight < 0 or (weight != 0 and weight <= Decimal("1e-9")):
        report("spec.fairSharing.weight", "When not 0, weight must be > 10e-9")


def _cohort_cycles(objects: Sequence[Mapping[str, Any]]) -> list[ObjectProblem]:
    parents = {
        o["metadata"]["name"]: (o.get("spec") or {}).get("parentName") for o in objects if o.get("kind") == "Cohort"
    }
    found = []
    for start in sorted(parents):
        seen = [start]
        node = parents.get(start)
        while node is not None and node in parents:
            if node == start:
                found.append(
                    ObjectProblem(
                        "Cohort",
                        start,
                        "spec.parentName",
                        f"cohort cycle: {' → '.join([*seen, start])}",
                        Source.WEBHOOK,
                    )
                )
                break
            if node in seen:
                break
            seen.append(node)
            node = parents.get(node)
    return found
