"""Frozen snapshots of the organisation tree: the only input the policy core reads.

A snapshot may hold the whole tree, or only the neighbourhood of an edit (the unit, its parent,
siblings and children, and the roots when a root is edited): every invariant is local to those
units, so the incremental checks give the same answer on either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType

from .budgets import Budget, BudgetSpend
from .quantity import Resource
from .sharing import WHOLE, FlavorSharing

QuotaKey = tuple[int, str, Resource]
"""(unit id, flavor key, resource)."""


class UnitKind(StrEnum):
    ORGANISATION = "organisation"
    DEPARTMENT = "department"
    TEAM = "team"
    PROJECT = "project"

    @property
    def rank(self) -> int:
        return _KIND_RANK[self]


_KIND_RANK = {UnitKind.ORGANISATION: 0, UnitKind.DEPARTMENT: 1, UnitKind.TEAM: 2, UnitKind.PROJECT: 3}


@dataclass(frozen=True, slots=True)
class Unit:
    id: int
    slug: str
    kind: UnitKind
    parent_id: int | None
    path: str
    weight: float = 1.0
    contract: str | None = None
    """Name of the contract set on this unit; ``None`` inherits the parent's."""
    kueue_name: str | None = None
    """Name of its Kueue objects when imported under another name; ``None``: derived from the path."""
    cost_centre: str | None = None
    """The cost centre its spend is charged to; ``None`` inherits the parent's."""


@dataclass(frozen=True, slots=True)
class Quota:
    guarantee: int = 0
    burst: int = 0
    lendable: int = 0

    @property
    def ceiling(self) -> int:
        return self.guarantee + self.burst


ZERO = Quota()


@dataclass(frozen=True, slots=True)
class Flavor:
    key: str
    """``"<cluster>/<flavor>"``, unique across the fleet."""
    physical_devices: int
    headroom_devices: int = 0
    capacity: Mapping[Resource, int] = field(default_factory=lambda: MappingProxyType({}))
    """Optional physical CPU (millicores) and memory (bytes) of the pool; unchecked when absent."""
    lends_idle_guarantees: bool = False
    """Any idle guaranteed device can be borrowed (Slurm: a burst QOS runs on any idle GPU), not only
    what units declare lendable (Kueue's ``lendingLimit``)."""
    sharing: FlavorSharing = WHOLE
    """Its sharing contract and profiles: a shared flavor's GPU figures are GPU-equivalents."""

    def physical(self, resource: Resource) -> int | None:
        if resource is Resource.GPU:
            return self.physical_devices
        return self.capacity.get(resource)


@dataclass(frozen=True, slots=True)
class Reservation:
    flavor: str
    name: str
    devices: int


@dataclass(frozen=True, slots=True)
class Contract:
    name: str
    reclaim_within_s: int
    grace_period_s: int
    min_run_window_s: int = 0
    checkpoint_every_s: int | None = None
    measured_exit_s: int = 0
    """Measured checkpoint-and-exit time of the work running under this contract."""
    reclaim_within_cohort: str = "Any"
    """Kueue ``preemption.reclaimWithinCohort``: Any (lent devices come back from every borrower),
    LowerPriority (only from borrowers of a lower tier: spares the same and higher tiers) or Never."""
    within_cluster_queue: str = "LowerPriority"
    """Kueue ``preemption.withinClusterQueue``: Never, LowerPriority or LowerOrNewerEqualPriority."""


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    priority: int
    preemptible: bool
    max_runtime_s: int | None = None
    opportunistic: bool = False
    """Runs on borrowed capacity, yields first, must declare a checkpoint cadence."""
    display_name: str = ""


@dataclass(frozen=True)
class OrgSnapshot:
    units: Mapping[int, Unit]
    quotas: Mapping[QuotaKey, Quota]
    flavors: Mapping[str, Flavor]
    reservations: tuple[Reservation, ...] = ()
    contracts: Mapping[str, Contract] = field(default_factory=lambda: MappingProxyType({}))
    tiers: Mapping[str, Tier] = field(default_factory=lambda: MappingProxyType({}))
    scheduling_pass_s: int = 10
    budgets: Mapping[tuple[int, str], Budget] = field(default_factory=lambda: MappingProxyType({}))
    """GPU-hour budgets per (unit id, flavor key)."""
    budget_spend: Mapping[tuple[int, str], BudgetSpend] = field(default_factory=lambda: MappingProxyType({}))
    """Each budget's current period as last evaluated (quotas.policy.budgets)."""
    complete: bool = True
    """False for a neighbourhood snapshot: whole-tree checks (cycles, roots) are skipped."""

    @cached_property
    def children(self) -> Mapping[int | None, tuple[int, ...]]:
        """Children ids per parent id (``None`` → roots), in id order."""
        found: dict[int | None, list[int]] = {}
        for unit in self.units.values():
            found.setdefault(unit.parent_id, []).append(unit.id)
        return {parent: tuple(sorted(ids)) for parent, ids in found.items()}

    @cached_property
    def children_guarantee(self) -> Mapping[QuotaKey, int]:
        """Per (parent id, flavor, resource): the sum of its children's guarantees (what the
        children-sum invariant compares with the parent's own, without walking the children)."""
        sums: dict[QuotaKey, int] = {}
        for (unit_id, flavor, resource), quota in self.quotas.items():
            unit = self.units.get(unit_id)
            if unit is not None and unit.parent_id is not None:
                key = (unit.parent_id, flavor, resource)
                sums[key] = sums.get(key, 0) + quota.guarantee
        return sums

    @cached_property
    def quota_keys_by_unit(self) -> Mapping[int, tuple[QuotaKey, ...]]:
        found: dict[int, list[QuotaKey]] = {}
        for key in self.quotas:
            found.setdefault(key[0], []).append(key)
        return {unit: tuple(keys) for unit, keys in found.items()}

    @cached_property
    def reserved_devices(self) -> Mapping[str, int]:
        totals: dict[str, int] = {}
        for reservation in self.reservations:
            totals[reservation.flavor] = totals.get(reservation.flavor, 0) + reservation.devices
        return totals

    def quota(self, unit_id: int, flavor: str, resource: Resource) -> Quota:
        return self.quotas.get((unit_id, flavor, resource), ZERO)

    def roots(self) -> tuple[int, ...]:
        return self.children.get(None, ())

    def ancestors(self, unit_id: int) -> list[int]:
        """Ids from the parent up to the root; stops at a unit missing from the snapshot."""
        chain: list[int] = []
        seen = {unit_id}
        parent = self.units[unit_id].parent_id
        while parent is not None and parent in self.units and parent not in seen:
            chain.append(parent)
            seen.add(parent)
            parent = self.units[parent].parent_id
        return chain

    def effective_contract(self, unit_id: int) -> Contract | None:
        """The contract set on the unit or its nearest ancestor that has one."""
        for uid in [unit_id, *self.ancestors(unit_id)]:
            name = self.units[uid].contract
            if name is not None:
                return self.contracts.get(name)
        return None

    def effective_cost_centre(self, unit_id: int) -> str | None:
        """The cost centre set on the unit or its nearest ancestor that has one."""
        for uid in [unit_id, *self.ancestors(unit_id)]:
            unit = self.units.get(uid)
            if unit is not None and unit.cost_centre:
                return unit.cost_centre
        return None

    def department(self, unit_id: int) -> Unit | None:
        """The department the unit is (in): itself or its nearest ancestor of that kind."""
        for uid in [unit_id, *self.ancestors(unit_id)]:
            unit = self.units.get(uid)
            if unit is not None and unit.kind is UnitKind.DEPARTMENT:
                return unit
        return None

    def path(self, unit_id: int) -> str:
        unit = self.units.get(unit_id)
        return unit.path if unit else f"#{unit_id}"
