"""Everything an object set must pass before any apply: schema + CEL, then webhook rules."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .problems import ObjectProblem
from .schema import CrdSchemas
from .target import object_key
from .webhook import check_webhook_rules


def validate_objects(
    objects: Sequence[Mapping[str, Any]],
    schemas: CrdSchemas,
    actual: Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None,
    *,
    written: Collection[tuple[str, str, str]] | None = None,
) -> list[ObjectProblem]:
    """All problems, in object order. ``actual`` (current objects by key) enables transition rules.

    ``written``: the keys of the objects a sync would write. Only those are checked against the schemas
    and CEL rules and Kueue's per-object webhook rules (an unchanged object is one the server already
    accepted, with the same owned fields); the rules that span objects (references, cohort cycles) always
    see the whole set. None checks every object."""
    found: list[ObjectProblem] = []
    for obj in objects:
        key = object_key(obj)
        if written is not None and key not in written:
            continue
        old = actual.get(key) if actual else None
        found += schemas.validate(obj, old)
    return found + check_webhook_rules(objects, written=written)
