"""Quota-aware showback: what each unit's entitlement and use cost over a period, in parts that add up
to the fleet. Pure: device-hour totals in, lines and cents out.

Per flavor and period, the fleet's device-hours (physical devices × hours) split into:

* **used** — held by a unit's own workloads inside its own guarantee;
* **idle** — the rest of its own guarantee that nobody used: the opportunity cost of the promise;
* **lent** — the part of its idle guarantee that other units borrowed (a credit to the lender: the
  borrower pays for it);
* **borrowed** — held above its guarantee (from others' lent guarantee or from unguaranteed capacity);
* **shared** — everything no unit holds or is promised: non-preemptible reservations, headroom,
  unguaranteed capacity nobody borrowed, and hours without telemetry (never counted as idle).

A unit's own guarantee is its guarantee minus its children's (DESIGN promise 1: they fit inside it),
so the tree's guarantees are counted once. Identity, per flavor:

    capacity = Σ used + Σ idle + Σ lent + Σ (borrowed − lent) + reservations + headroom + free
    fleet    = capacity + no telemetry
    fleet    = Σ used + Σ idle + Σ borrowed + shared

A unit is charged for used + idle + borrowed (its guarantee, less what it lent, plus what it
borrowed). The shared part is charged by the organisation's rule (``SharedCost``): not shared (its
own line), in proportion to each unit's guarantee, or in proportion to its use (used + borrowed).
Costs are device-hours × the flavor's price per device-hour, rounded to the cent so that the lines of
a flavor add up to the fleet's cost exactly (largest remainder). A flavor without a price has no cost
(None), never zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from enum import StrEnum

CENT = Decimal("0.01")
SHARED = 0
"""The unit id of a flavor's undistributed shared line (``SharedCost.NOT_SHARED``)."""


class SharedCost(StrEnum):
    NOT_SHARED = "not_shared"
    GUARANTEE = "guarantee"
    USE = "use"


@dataclass(frozen=True)
class UnitUsage:
    """One unit on one flavor over the period, device-hours of its own workloads and guarantee."""

    unit: int
    flavor: int
    guarantee: float
    """Its own guarantee-hours (its children's taken out)."""
    within: float
    borrowed: float
    lent: float


@dataclass(frozen=True)
class FlavorPeriod:
    flavor: int
    price: Decimal | None
    """Per device-hour; None when the flavor has no price."""
    devices: int
    hours: float
    """Hours in the period."""
    covered_hours: float
    """Hours with telemetry."""
    reserved: int = 0
    headroom: int = 0

    @property
    def fleet(self) -> float:
        return self.devices * self.hours

    @property
    def capacity(self) -> float:
        return self.devices * self.covered_hours


@dataclass(frozen=True)
class Line:
    unit: int
    flavor: int
    guarantee: float
    used: float
    idle: float
    lent: float
    borrowed: float
    shared: float = 0.0
    """Its share of the flavor's shared device-hours (by the organisation's rule)."""
    cost: Decimal | None = None
    """Charged: used + idle + borrowed + shared, in money."""
    idle_cost: Decimal | None = None
    lent_credit: Decimal | None = None

    @property
    def charged(self) -> float:
        return self.used + self.idle + self.borrowed + self.shared


@dataclass(frozen=True)
class FlavorTotals:
    flavor: int
    fleet: float
    capacity: float
    no_telemetry: float
    used: float
    idle: float
    lent: float
    borrowed: float
    reserved: float
    headroom: float
    free: float
    """Unguaranteed capacity nobody borrowed (negative: more in use than the flavor has — bad data)."""
    shared: float
    fleet_cost: Decimal | None
    unshared_cost: Decimal | None
    """What stays on the shared line (rule 'not shared', or nobody to share it with)."""


@dataclass
class Showback:
    lines: list[Line] = field(default_factory=list)
    flavors: dict[int, FlavorTotals] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def showback(usage: Iterable[UnitUsage], flavors: Mapping[int, FlavorPeriod], rule: SharedCost) -> Showback:
    """Lines per unit × flavor and totals per flavor (see the module docstring)."""
    result = Showback()
    by_flavor: dict[int, list[UnitUsage]] = {}
    for row in usage:
        by_flavor.setdefault(row.flavor, []).append(row)
    for flavor_id, period in sorted(flavors.items()):
        rows = by_flavor.get(flavor_id, [])
        lines = []
        for row in rows:
            idle = max(0.0, row.guarantee - row.within - row.lent)
            if row.within + row.lent > row.guarantee + 1e-6:
                result.problems.append(
                    f"unit {row.unit} on flavor {flavor_id}: used {row.within:.2f} + lent {row.lent:.2f} device-hours "
                    f"exceed its own guarantee of {row.guarantee:.2f}"
                )
            lines.append(Line(row.unit, flavor_id, row.guarantee, row.within, idle, row.lent, row.borrowed))
        used = sum(line.used for line in lines)
        idle = sum(line.idle for line in lines)
        lent = sum(line.lent for line in lines)
        borrowed = sum(line.borrowed for line in lines)
        no_telemetry = period.fleet - period.capacity
        reserved = period.reserved * period.covered_hours
        headroom = period.headroom * period.covered_hours
        shared = period.fleet - used - idle - borrowed
        free = shared - reserved - headroom - no_telemetry
        if free < -1e-6:
            result.problems.append(
                f"flavor {flavor_id}: {-free:.2f} device-hours more in use or promised than it has: check its size"
            )
        lines = _share(lines, shared, rule)
        kept = shared - sum(line.shared for line in lines)
        lines, fleet_cost, unshared_cost = _costs(lines, period, kept)
        result.lines += lines
        result.flavors[flavor_id] = FlavorTotals(
            flavor_id, period.fleet, period.capacity, no_telemetry, used, idle, lent, borrowed, reserved, headroom,
            free, shared, fleet_cost, unshared_cost,
        )  # fmt: skip
    return result


def _share(lines: list[Line], shared: float, rule: SharedCost) -> list[Line]:
    if rule is SharedCost.NOT_SHARED or shared <= 0:
        return lines
    weights = [line.guarantee if rule is SharedCost.GUARANTEE else line.used + line.borrowed for line in lines]
    total = sum(weights)
    if total <= 0:
        return lines
    return [replace(line, shared=shared * w / total) for line, w in zip(lines, weights, strict=True)]


def _costs(lines: list[Line], period: FlavorPeriod, kept: float) -> tuple[list[Line], Decimal | None, Decimal | None]:
    """Each line's cost in cents, adding up exactly to the flavor's fleet cost (largest remainder)."""
    if period.price is None:
        return lines, None, None
    price = period.price
    fleet_cost = (price * _hours(period.fleet)).quantize(CENT, ROUND_HALF_UP)
    exact = [price * _hours(line.charged) for line in lines] + [price * _hours(kept)]
    cents = allocate_cents(int(fleet_cost / CENT), exact)
    costed = [
        replace(
            line,
            cost=Decimal(c) * CENT,
            idle_cost=(price * _hours(line.idle)).quantize(CENT, ROUND_HALF_UP),
            lent_credit=(price * _hours(line.lent)).quantize(CENT, ROUND_HALF_UP),
        )
        for line, c in zip(lines, cents, strict=False)
    ]
    return costed, fleet_cost, Decimal(cents[-1]) * CENT


def _hours(value: float) -> Decimal:
    return Decimal(repr(value)).quantize(Decimal("0.000001"))


def allocate_cents(total: int, exact: Sequence[Decimal]) -> list[int]:
    """Whole cents per part, adding up to ``total``: each part's exact amount rounded down, the cents
    left over given to the largest remainders (ties: the earlier part)."""
    if not exact:
        return []
    scaled = [amount / CENT for amount in exact]
    floors = [int(x.to_integral_value(rounding="ROUND_FLOOR")) for x in scaled]
    left = total - sum(floors)
    order = sorted(range(len(scaled)), key=lambda i: (-(scaled[i] - floors[i]), i))
    step = 1 if left >= 0 else -1
    for k in range(abs(left)):
        floors[order[k % len(order)] if step > 0 else order[-1 - k % len(order)]] += step
    return floors


def roll_up(lines: Iterable[Line], parent_of: Mapping[int, int | None]) -> dict[tuple[int, int], Line]:
    """Every unit's lines plus its descendants', per flavor: what a department sees for its subtree."""
    totals: dict[tuple[int, int], Line] = {}
    for line in lines:
        if line.unit == SHARED:
            continue
        unit: int | None = line.unit
        while unit is not None:
            key = (unit, line.flavor)
            before = totals.get(key)
            totals[key] = line if before is None else _add(before, line, unit)
            unit = parent_of.get(unit)
    return {key: replace(value, unit=key[0]) for key, value in totals.items()}


def _add(a: Line, b: Line, unit: int) -> Line:
    def money(x: Decimal | None, y: Decimal | None) -> Decimal | None:
        return None if x is None or y is None else x + y

    return Line(
        unit=unit,
        flavor=a.flavor,
        guarantee=a.guarantee + b.guarantee,
        used=a.used + b.used,
        idle=a.idle + b.idle,
        lent=a.lent + b.lent,
        borrowed=a.borrowed + b.borrowed,
        shared=a.shared + b.shared,
        cost=money(a.cost, b.cost),
        idle_cost=money(a.idle_cost, b.idle_cost),
        lent_credit=money(a.lent_credit, b.lent_credit),
    )


def children_sums(
    values: Mapping[tuple[int, int], float], parent_of: Mapping[int, int | None]
) -> dict[tuple[int, int], float]:
    """Per (unit, flavor), the sum of its children's values: what a unit's guarantee hands down, so
    that its *own* guarantee is its guarantee less this (DESIGN promise 1)."""
    sums: dict[tuple[int, int], float] = {}
    for (unit, flavor), value in values.items():
        parent = parent_of.get(unit)
        if parent is not None:
            sums[(parent, flavor)] = sums.get((parent, flavor), 0.0) + value
    return sums
