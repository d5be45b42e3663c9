"""Showback adds up: on random usage, the parts make the fleet's device-hours and the lines' cents make
the fleet's cost exactly, under each shared-cost rule; unknown prices stay unknown."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from accounting.policy.showback import (
    FlavorPeriod,
    SharedCost,
    UnitUsage,
    allocate_cents,
    roll_up,
    showback,
)


def random_month(seed: int) -> tuple[list[UnitUsage], dict[int, FlavorPeriod]]:
    rng = random.Random(seed)
    flavors = {}
    usage = []
    for flavor in (1, 2, 3):
        devices = rng.choice([8, 64, 512])
        hours = 744.0
        covered = hours - rng.choice([0, 0, 24, 7.5])
        reserved, headroom = rng.randint(0, devices // 8), rng.randint(0, devices // 8)
        price = Decimal(rng.choice(["2.4999", "0.87", "3.1"]))
        flavors[flavor] = FlavorPeriod(flavor, price, devices, hours, covered, reserved, headroom)
        promised = (devices - reserved - headroom) * covered
        units = rng.randint(1, 12)
        for unit in range(1, units + 1):
            guarantee = promised / units * rng.uniform(0.2, 1.0)
            within = guarantee * rng.uniform(0, 1)
            lent = (guarantee - within) * rng.uniform(0, 0.5)
            borrowed = rng.uniform(0, 0.05) * promised / units
            usage.append(UnitUsage(unit * 10 + flavor, flavor, guarantee, within, borrowed, lent))
    return usage, flavors


@pytest.mark.parametrize("rule", list(SharedCost))
@pytest.mark.parametrize("seed", range(25))
def test_parts_add_up_to_the_fleet_to_the_cent(seed: int, rule: SharedCost) -> None:
    usage, flavors = random_month(seed)
    result = showback(usage, flavors, rule)
    for flavor, period in flavors.items():
        totals = result.flavors[flavor]
        lines = [line for line in result.lines if line.flavor == flavor]
        hours = sum(line.used + line.idle + line.borrowed for line in lines) + totals.shared
        assert hours == pytest.approx(period.devices * period.hours)
        assert totals.used + totals.idle + totals.lent + (totals.borrowed - totals.lent) + totals.reserved + (
            totals.headroom + totals.free + totals.no_telemetry
        ) == pytest.approx(totals.fleet)
        cost = sum((line.cost for line in lines if line.cost is not None), Decimal(0))
        assert cost + (totals.unshared_cost or 0) == totals.fleet_cost  # exactly, to the cent
        assert period.price is not None
        assert totals.fleet_cost == (period.price * Decimal(period.devices * 744)).quantize(Decimal("0.01"))
        if rule is SharedCost.NOT_SHARED:
            assert all(line.shared == 0 for line in lines)
        else:
            assert sum(line.shared for line in lines) == pytest.approx(totals.shared)
            assert totals.unshared_cost is not None and abs(totals.unshared_cost) <= Decimal("0.01") * len(lines)


def test_a_worked_example() -> None:
    # 10 devices, 10 hours (100 device-hours); nlp guarantees 6, used 30 device-hours, lent 10 of its
    # idle 30; vision guarantees 2 and borrowed 14 (10 from nlp, 4 unguaranteed); 1 device reserved.
    usage = [UnitUsage(1, 1, 60, 30, 0, 10), UnitUsage(2, 1, 20, 20, 14, 0)]
    period = FlavorPeriod(1, Decimal("2.00"), devices=10, hours=10, covered_hours=10, reserved=1, headroom=0)
    result = showback(usage, {1: period}, SharedCost.NOT_SHARED)
    nlp, vision = result.lines
    assert (nlp.used, nlp.idle, nlp.lent, nlp.cost, nlp.idle_cost, nlp.lent_credit) == (
        30, 20, 10, Decimal("100.00"), Decimal("40.00"), Decimal("20.00")
    )  # fmt: skip
    assert (vision.used, vision.borrowed, vision.cost) == (20, 14, Decimal("68.00"))
    totals = result.flavors[1]
    assert (totals.reserved, totals.free, totals.shared, totals.unshared_cost) == (10, 6, 16, Decimal("32.00"))
    assert totals.fleet_cost == Decimal("200.00")
    shared_by_guarantee = showback(usage, {1: period}, SharedCost.GUARANTEE)
    assert [line.shared for line in shared_by_guarantee.lines] == [12, 4]  # 16 in 60 : 20


def test_a_flavor_without_a_price_has_no_cost_not_zero() -> None:
    period = FlavorPeriod(1, None, devices=4, hours=24, covered_hours=24)
    result = showback([UnitUsage(1, 1, 48, 10, 0, 0)], {1: period}, SharedCost.USE)
    assert result.lines[0].cost is None and result.flavors[1].fleet_cost is None
    assert result.lines[0].idle == 38


def test_more_use_than_the_flavor_has_is_reported() -> None:
    period = FlavorPeriod(1, Decimal(1), devices=1, hours=10, covered_hours=10)
    result = showback([UnitUsage(1, 1, 10, 10, 5, 0)], {1: period}, SharedCost.NOT_SHARED)
    assert result.flavors[1].free == -5 and "more in use or promised than it has" in result.problems[0]


def test_cents_are_allocated_by_largest_remainder() -> None:
    assert allocate_cents(100, [Decimal("0.333"), Decimal("0.333"), Decimal("0.334")]) == [33, 33, 34]
    assert sum(allocate_cents(1001, [Decimal("3.337")] * 3)) == 1001


def test_roll_up_adds_children_into_every_ancestor() -> None:
    usage = [UnitUsage(3, 1, 10, 5, 1, 0), UnitUsage(4, 1, 10, 10, 0, 0), UnitUsage(2, 1, 0, 0, 2, 0)]
    period = FlavorPeriod(1, Decimal(1), devices=30, hours=1, covered_hours=1)
    lines = showback(usage, {1: period}, SharedCost.NOT_SHARED).lines
    rolled = roll_up(lines, {3: 2, 4: 2, 2: 1, 1: None})
    assert rolled[(2, 1)].used == 15 and rolled[(2, 1)].borrowed == 3 and rolled[(1, 1)].guarantee == 20
    assert rolled[(1, 1)].cost == sum((line.cost for line in lines if line.cost), Decimal(0))
