"""Everything an object set must pass before any apply: schema + CEL, then webhook rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .problems import ObjectProblem
from .schema import CrdSchemas
from .translate import object_key
from .webhook import check_webhook_rules


def validate_objects(
    objects: Sequence[Mapping[str, Any]],
    schemas: CrdSchemas,
    actual: Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None,
) -> list[ObjectProblem]:
    """All problems, in object order. ``actual`` (current objects by key) enables transition rules."""
    found: list[ObjectProblem] = []
    for obj in objects:
        old = actual.get(object_key(obj)) if actual else None
        found += schemas.validate(obj, old)
    return found + check_webhook_rules(objects)
