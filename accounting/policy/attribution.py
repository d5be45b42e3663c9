"""Who used whose devices, per flavor and interval (the rule the rollups implement in SQL).

For each unit with guarantee G, lendable L ≤ G and held devices A in one interval:

* within its guarantee W = min(A, G); borrowed B = A − W; idle guarantee I = G − W;
* the flavor's borrowed devices ΣB come first from capacity no unit guarantees (the flavor's devices
  minus every guarantee: U = max(0, physical − ΣG)), then from the idle lendable guarantees of the
  other units, in proportion to each one's min(I, L): that share is the unit's **lent**.

So in every interval ΣW + ΣB = devices held and Σlent ≤ ΣB (tested on random intervals, and the SQL
rollups against this function). This version treats every unit of a flavor as one cohort; lending
only within the nearest common cohort is a refinement for nested cohorts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UnitInterval:
    guarantee: int
    lendable: int
    held: int
    queued: int = 0

    @property
    def within(self) -> int:
        return min(self.held, self.guarantee)

    @property
    def borrowed(self) -> int:
        return self.held - self.within

    @property
    def idle(self) -> int:
        return self.guarantee - self.within


@dataclass(frozen=True)
class Split:
    within: float
    borrowed: float
    idle: float
    lent: float


def attribute(units: Mapping[str, UnitInterval], physical: int) -> dict[str, Split]:
    """Each unit's within / borrowed / idle / lent for one flavor and interval."""
    borrowed = sum(u.borrowed for u in units.values())
    unguaranteed = max(0, physical - sum(u.guarantee for u in units.values()))
    from_lenders = max(0, borrowed - unguaranteed)
    offer = {k: min(u.idle, u.lendable) for k, u in units.items()}
    total_offer = sum(offer.values())
    take = min(from_lenders, total_offer)
    return {
        k: Split(u.within, u.borrowed, u.idle, take * offer[k] / total_offer if total_offer else 0.0)
        for k, u in units.items()
    }
