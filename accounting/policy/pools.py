"""The pool table (seed 8.12.2, the shape of Table 9): per flavor (a pool) and period, how much of its
capacity was allocated, how much of the allocated was active, productive where measured, and the
demand that waited — beside the period before, so a policy change shows as a change in points.

Capacity counts only the hours with telemetry (devices × hours with any rollup row on the flavor): a
gap is missing data, never idle capacity. For a unit's subtree, capacity is its guarantee over those
hours. Active share is over the allocated hours that had an activity measurement (DCGM); without
one it is unknown, not zero. Productive is measured where a workload reports it, else estimated
(allocated minus the work evictions lost) and flagged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PoolHours:
    """One pool's sums over a period (fleet-wide or one subtree)."""

    flavor: str
    devices: float
    """Physical devices of the flavor (fleet), or the subtree's guarantee."""
    hours: int
    """Hours of the period with telemetry on the flavor."""
    allocated_h: float
    pending_h: float
    measured_allocated_h: float = 0.0
    """Allocated device-hours that had an activity measurement."""
    active_h: float = 0.0
    productive_h: float | None = None
    productive_estimated: bool = False
    memory_gb: int = 0

    @property
    def capacity_h(self) -> float:
        return self.devices * self.hours


@dataclass(frozen=True)
class PoolLine:
    flavor: str
    memory_gb: int
    capacity_h: float
    allocated_h: float
    allocated_pct: float | None
    active_pct: float | None
    """Active share of the allocated device-hours that were measured; None: not measured."""
    productive_pct: float | None
    productive_estimated: bool
    pending_h: float
    idle_h: float
    before: PoolLine | None = None

    def change_pp(self, name: str) -> float | None:
        """This period's figure minus the one before, in percentage points."""
        if self.before is None:
            return None
        now, then = getattr(self, name), getattr(self.before, name)
        return None if now is None or then is None else round(now - then, 1)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "flavor": self.flavor,
            "memory_gb": self.memory_gb,
            "capacity_h": round(self.capacity_h, 1),
            "allocated_h": round(self.allocated_h, 1),
            "allocated_pct": self.allocated_pct,
            "active_pct": self.active_pct,
            "productive_pct": self.productive_pct,
            "productive_estimated": self.productive_estimated,
            "pending_h": round(self.pending_h, 1),
            "idle_h": round(self.idle_h, 1),
        }
        for name in ("allocated_pct", "active_pct", "productive_pct"):
            out[f"{name}_change_pp"] = self.change_pp(name)
        out["before"] = self.before.as_dict() if self.before else None
        return out


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 1) if whole > 0 else None


def pool_line(hours: PoolHours, before: PoolHours | None = None) -> PoolLine:
    productive = None if hours.productive_h is None else _pct(hours.productive_h, hours.allocated_h)
    return PoolLine(
        hours.flavor,
        hours.memory_gb,
        hours.capacity_h,
        hours.allocated_h,
        _pct(hours.allocated_h, hours.capacity_h),
        _pct(hours.active_h, hours.measured_allocated_h),
        productive,
        hours.productive_estimated,
        hours.pending_h,
        max(0.0, hours.capacity_h - hours.allocated_h),
        pool_line(before) if before is not None else None,
    )


def pool_table(now: Iterable[PoolHours], before: Mapping[str, PoolHours]) -> list[PoolLine]:
    """One line a pool, largest device memory first (as Table 9 lists them), with the period before."""
    lines = [pool_line(h, before.get(h.flavor)) for h in now]
    return sorted(lines, key=lambda line: (-line.memory_gb, line.flavor))


def fleet_hours(pools: Iterable[PoolHours]) -> PoolHours | None:
    """The fleet's row as one pool: every pool's hours added (capacity of each over its own hours)."""
    found = list(pools)
    if not found:
        return None
    capacity = sum(p.capacity_h for p in found)
    productive = [p.productive_h for p in found if p.productive_h is not None]
    return PoolHours(
        "fleet",
        capacity,
        1,
        sum(p.allocated_h for p in found),
        sum(p.pending_h for p in found),
        sum(p.measured_allocated_h for p in found),
        sum(p.active_h for p in found),
        sum(productive) if productive else None,
        any(p.productive_estimated for p in found),
    )
