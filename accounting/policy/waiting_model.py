"""What the waiting explanation reads and answers (accounting.policy.waiting): the live view of one cluster — what
each admitted workload holds, what waits — and the explanation's causes and ways out. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from accounting.policy.kueue_ask import Ask


@dataclass(frozen=True)
class Holding:
    """An admitted workload: what it holds now."""

    name: str
    """``namespace/name`` (Kueue) or the job id (Slurm)."""
    unit_id: int | None
    unit: str
    """The unit's path: other units' work is named by its unit, not its owner."""
    owner: str
    tier: str
    flavor: str
    """Flavor key, ``cluster/flavor``."""
    devices: int
    borrowed: int = 0
    since: datetime | None = None


@dataclass(frozen=True)
class Pending:
    name: str
    unit_id: int | None
    owner: str
    tier: str
    queue: str
    created: datetime | None
    ask: Ask
    flavors: tuple[str, ...] | None = None
    """Flavor keys its placement allows; None: any flavor of the cluster; (): none."""


@dataclass(frozen=True)
class LiveView:
    cluster: str
    observed_at: datetime | None
    """When the live state was last refreshed from the scheduler (its age is shown with every answer)."""
    flavors: tuple[str, ...]
    """The cluster's flavor keys in the order the scheduler tries them."""
    holding: tuple[Holding, ...] = ()
    pending: tuple[Pending, ...] = ()
    blocks: Mapping[str, int] = field(default_factory=dict)
    """Flavor key → the most free devices on one node, from the last node sample (fragmentation), if recent."""

    @cached_property
    def held_by(self) -> Mapping[tuple[int | None, str], int]:
        """(unit id, flavor key) → devices its admitted work holds; (None, flavor): the flavor's total."""
        out: dict[tuple[int | None, str], int] = {}
        for h in self.holding:
            out[(h.unit_id, h.flavor)] = out.get((h.unit_id, h.flavor), 0) + h.devices
            out[(None, h.flavor)] = out.get((None, h.flavor), 0) + h.devices
        return out


@dataclass(frozen=True)
class Cause:
    code: str
    title: str
    evidence: tuple[str, ...] = ()
    rank: int = 0


@dataclass(frozen=True)
class WayOut:
    kind: str
    """``smaller``, ``other-flavor``, ``quota-change``, ``wait-reclaim``, ``wait-finish``, ``budget``; on Slurm
    also ``other-qos``, ``wait-queue`` (jobs ranked above it) and ``ask`` (a limit set outside Allot)."""
    text: str
    devices: int | None = None
    flavor: str | None = None
    change: Mapping[str, int] | None = None
    """For ``quota-change``: the unit's new guarantee/burst on the flavor, checked by the service."""
    by: datetime | None = None


@dataclass(frozen=True)
class Explanation:
    workload: str
    unit: str
    devices: int
    causes: tuple[Cause, ...]
    ways_out: tuple[WayOut, ...]
    scheduler_says: str
    observed_at: datetime | None
    room: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Per candidate flavor: guarantee, ceiling, held (the unit's), free (the flavor's), room (what would start)."""

    @property
    def top(self) -> Cause | None:
        return self.causes[0] if self.causes else None
