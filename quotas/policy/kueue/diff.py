"""Desired vs actual Kueue objects, on the fields Allot owns; the plan a sync carries out.

Allot owns what it sends: its labels (``app.kubernetes.io/managed-by`` and every ``allot.dev/`` one:
the cluster and the organisation's unit, department and cost centre) and annotations (not the revision
stamp), ``spec`` of the CRD kinds, and ``value``/``description`` of priority classes. Server defaults it never sent are
compared only where they change admission (``ADMISSION_FIELDS``: ``stopPolicy``, admission checks,
``flavorFungibility``): there a non-default value is drift. Quantities compare by value
(``"1Ti"`` equals ``"1024Gi"``). A field that Allot owned on the server (its ``managedFields``
entry) and no longer sends is reported as a removal: a server-side apply will drop it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..quantity import parse_decimal_quantity
from .target import ANNOTATION_REVISION, APPLY_ORDER, LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_PREFIX, object_key

QUANTITY_FIELDS = {"nominalQuota", "borrowingLimit", "lendingLimit", "weight"}
ADMISSION_FIELDS: dict[str, dict[str, Any]] = {
    "ClusterQueue": {
        "stopPolicy": "None",
        "admissionChecks": None,
        "admissionChecksStrategy": None,
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
    },
    "LocalQueue": {"stopPolicy": "None"},
}
"""Fields Allot does not send but that change what gets admitted, with their neutral values (Kueue's
defaults; None: absent). Set to anything else on one of Allot's objects, they are drift — a
``stopPolicy: HoldAndDrain`` stops and evicts a whole queue — and correcting it sends the neutral
value so Allot takes the field over."""
MANAGER = "allot"
Key = tuple[str, str, str]


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class FieldChange:
    path: str
    desired: Any
    actual: Any

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "desired": self.desired, "actual": self.actual}


@dataclass(frozen=True, slots=True)
class ObjectPlan:
    kind: str
    namespace: str
    name: str
    action: Action
    changes: tuple[FieldChange, ...] = ()
    desired: Mapping[str, Any] | None = None

    @property
    def key(self) -> Key:
        return (self.kind, self.namespace, self.name)


def owned(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an object Allot owns and compares."""
    meta = obj.get("metadata") or {}
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if k in (LABEL_MANAGED_BY, LABEL_CLUSTER) or k.startswith(LABEL_PREFIX)
    }
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith("allot.dev/") and k != ANNOTATION_REVISION
    }
    view: dict[str, Any] = {"metadata": {"labels": labels, "annotations": annotations}}
    for field in ("spec", "value", "description"):
        if field in obj:
            view[field] = obj[field]
    return view


def admission_drift(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> list[FieldChange]:
    """Fields of ``ADMISSION_FIELDS`` that Allot does not send and someone set to a non-neutral value."""
    neutral = ADMISSION_FIELDS.get(str(desired.get("kind")), {})
    sent, found = desired.get("spec") or {}, actual.get("spec") or {}
    changes = []
    for field, value in neutral.items():
        if field in sent:
            continue
        current = found.get(field)
        if current in (None, [], {}) and value is None:
            continue
        if current is None or current == value:
            continue
        changes.append(FieldChange(f"spec.{field}", value, current))
    return changes


def with_neutral(desired: Mapping[str, Any], changes: Sequence[FieldChange]) -> dict[str, Any]:
    """``desired`` carrying the neutral value of each admission field in ``changes`` that has one
    (``stopPolicy``, ``flavorFungibility``), so an apply resets it. A field whose neutral state is
    absence (admission checks) cannot be removed by an apply: it stays reported until removed."""
    spec = dict(desired.get("spec") or {})
    for change in changes:
        if change.desired is not None:
            spec[change.path.removeprefix("spec.")] = change.desired
    return {**desired, "spec": spec}


def diff_object(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> list[FieldChange]:
    """Field-level differences on what Allot owns, and on the admission fields it leaves at their
    neutral values (``ADMISSION_FIELDS``), in path order."""
    changes: list[FieldChange] = admission_drift(desired, actual)
    _compare(owned(desired), owned(actual), "", changes)
    desired_view = owned(desired)
    neutral = ADMISSION_FIELDS.get(str(desired.get("kind")), {})
    for path in _managed_paths(actual):
        if path[0] == "metadata":
            continue
        present, _ = _lookup(desired_view, path)
        found, value = _lookup(actual, path)
        if len(path) >= 2 and path[0] == "spec" and path[1] in neutral:
            continue  # an admission field Allot once reset to neutral: compared by admission_drift above
        if not present and found:
            changes.append(FieldChange(".".join(path), None, value))
    return sorted({c.path: c for c in changes}.values(), key=lambda c: c.path)


def _compare(desired: Any, actual: Any, path: str, changes: list[FieldChange]) -> None:
    if isinstance(desired, dict) and isinstance(actual, dict):
        for key, value in desired.items():
            _compare(value, actual.get(key), f"{path}.{key}" if path else key, changes)
    elif _named(desired) and _named(actual) and {d["name"] for d in desired} == {a["name"] for a in actual}:
        # lists of named items (flavors, resources): a reorder is an order change, not a quantity change
        if [d["name"] for d in desired] != [a["name"] for a in actual]:
            changes.append(FieldChange(f"{path} (order)", [d["name"] for d in desired], [a["name"] for a in actual]))
        by_name = {a["name"]: a for a in actual}
        for i, d in enumerate(desired):
            _compare(d, by_name[d["name"]], f"{path}[{i}]", changes)
    elif isinstance(desired, list) and isinstance(actual, list) and len(desired) == len(actual):
        for i, (d, a) in enumerate(zip(desired, actual, strict=True)):
            _compare(d, a, f"{path}[{i}]", changes)
    elif not _equal(desired, actual, path):
        changes.append(FieldChange(path, desired, actual))


def _named(items: Any) -> bool:
    return isinstance(items, list) and bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _equal(desired: Any, actual: Any, path: str) -> bool:
    if desired == actual:
        return True
    if actual is None and desired in ({}, []):  # the API server keeps no empty map or list (a flavor's nodeLabels)
        return True
    if path.rsplit(".", 1)[-1] in QUANTITY_FIELDS and desired is not None and actual is not None:
        try:
            return parse_decimal_quantity(str(desired)) == parse_decimal_quantity(str(actual))
        except ValueError:
            return False
    return False


def _managed_paths(actual: Mapping[str, Any]) -> Iterator[tuple[str, ...]]:
    """Dict-key paths Allot's field manager owns on the server (lists count as leaves). An object
    with no managedFields (compiled for a preview, read from files) is taken as wholly Allot's."""
    entries = (actual.get("metadata") or {}).get("managedFields")
    if not entries:
        yield from _dict_paths(owned(actual), ())
        return
    for entry in entries:
        if entry.get("manager") == MANAGER and entry.get("operation") == "Apply":
            yield from _walk_fields(entry.get("fieldsV1") or {}, ())


def _walk_fields(fields: Mapping[str, Any], prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for key, child in fields.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        if isinstance(child, dict) and any(k.startswith("f:") for k in child):
            yield from _walk_fields(child, path)
        else:
            yield path


def _dict_paths(obj: Mapping[str, Any], prefix: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for key, child in obj.items():
        if isinstance(child, Mapping) and child:
            yield from _dict_paths(child, (*prefix, key))
        else:
            yield (*prefix, key)


def _lookup(obj: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    node = obj
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def plan_sync(desired: Sequence[Mapping[str, Any]], actual: Mapping[Key, Mapping[str, Any]]) -> list[ObjectPlan]:
    """Creates and updates in apply order, then deletions of Allot's objects no longer desired,
    in reverse dependency order (priority classes, local queues, cluster queues, cohorts
    children-first, flavors)."""
    plans = []
    wanted = set()
    for obj in desired:
        key = object_key(obj)
        wanted.add(key)
        current = actual.get(key)
        if current is None:
            plans.append(ObjectPlan(*key, action=Action.CREATE, desired=obj))
        else:
            changes = tuple(diff_object(obj, current))
            reset = [c for c in changes if c.path.removeprefix("spec.") in ADMISSION_FIELDS.get(key[0], {})]
            body = with_neutral(obj, reset) if reset else obj
            plans.append(
                ObjectPlan(*key, action=Action.UPDATE if changes else Action.UNCHANGED, changes=changes, desired=body)
            )
    stale = [key for key in actual if key not in wanted]
    order = {kind: i for i, kind in enumerate(APPLY_ORDER)}
    stale.sort(key=lambda k: (-order.get(k[0], -1), -k[2].count("."), k[1], k[2]))
    plans += [ObjectPlan(*key, action=Action.DELETE) for key in stale]
    return plans


def preview(current: Sequence[Mapping[str, Any]], proposed: Sequence[Mapping[str, Any]]) -> list[ObjectPlan]:
    """What a proposed change would do to a cluster: the plan from the objects compiled now to the
    objects compiled with the change (the same code path as a sync). Unchanged objects are left out."""
    plans = plan_sync(proposed, {object_key(obj): obj for obj in current})
    return [plan for plan in plans if plan.action is not Action.UNCHANGED]
