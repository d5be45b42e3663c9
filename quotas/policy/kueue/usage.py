"""What Kueue says each ClusterQueue holds now: ``status.flavorsUsage`` (admitted workloads)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..quantity import Resource, parse_decimal_quantity
from .target import ANNOTATION_UNIT

_SCALE = {Resource.GPU: 1, Resource.CPU: 1000, Resource.MEMORY: 1}


@dataclass(frozen=True, slots=True)
class QueueUsage:
    queue: str
    unit_path: str
    flavor: str
    resource: Resource
    total: int
    borrowed: int


def queue_usage(objects: Iterable[Mapping[str, Any]]) -> list[QueueUsage]:
    """Usage per ClusterQueue, flavor and resource, in base units; unknown resources and malformed
    entries are skipped (a status is the controller's, not ours to refuse)."""
    found = []
    for obj in objects:
        if obj.get("kind") != "ClusterQueue":
            continue
        meta = obj.get("metadata") or {}
        path = (meta.get("annotations") or {}).get(ANNOTATION_UNIT, "")
        for flavor in (obj.get("status") or {}).get("flavorsUsage") or []:
            for entry in flavor.get("resources") or []:
                try:
                    resource = Resource(entry.get("name"))
                    total = int(parse_decimal_quantity(str(entry.get("total", 0))) * _SCALE[resource])
                    borrowed = int(parse_decimal_quantity(str(entry.get("borrowed", 0))) * _SCALE[resource])
                except ValueError:
                    continue
                found.append(QueueUsage(meta.get("name", ""), path, str(flavor.get("name")), resource, total, borrowed))
    return found
