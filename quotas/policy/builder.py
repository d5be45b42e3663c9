"""Build snapshots in code: for tests, benchmarks and what-if tools (no database involved)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .quantity import Resource
from .snapshot import Contract, Flavor, OrgSnapshot, Quota, QuotaKey, Reservation, Tier, Unit, UnitKind


@dataclass
class TreeBuilder:
    units: dict[int, Unit] = field(default_factory=dict)
    quotas: dict[QuotaKey, Quota] = field(default_factory=dict)
    flavors: dict[str, Flavor] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    contracts: dict[str, Contract] = field(default_factory=dict)
    tiers: dict[str, Tier] = field(default_factory=dict)

    def flavor(self, key: str, devices: int, *, headroom: int = 0) -> str:
        self.flavors[key] = Flavor(key, devices, headroom)
        return key

    def unit(
        self,
        slug: str,
        kind: UnitKind,
        parent: int | None = None,
        *,
        weight: float = 1.0,
        contract: str | None = None,
        cost_centre: str | None = None,
    ) -> int:
        uid = len(self.units) + 1
        path = slug if parent is None else f"{self.units[parent].path}/{slug}"
        self.units[uid] = Unit(uid, slug, kind, parent, path, weight, contract, cost_centre=cost_centre)
        return uid

    def quota(
        self, unit: int, flavor: str, resource: Resource, guarantee: int, burst: int = 0, lendable: int = 0
    ) -> None:
        self.quotas[(unit, flavor, resource)] = Quota(guarantee, burst, lendable)

    def build(self, *, scheduling_pass_s: int = 10) -> OrgSnapshot:
        return OrgSnapshot(
            units=dict(self.units),
            quotas=dict(self.quotas),
            flavors=dict(self.flavors),
            reservations=tuple(self.reservations),
            contracts=dict(self.contracts),
            tiers=dict(self.tiers),
            scheduling_pass_s=scheduling_pass_s,
        )
