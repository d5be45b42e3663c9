"""The pool table's arithmetic: shares of the hours with telemetry, active over the measured, the
change against the period before in points, the fleet's row adding the pools up."""

from __future__ import annotations

import pytest

from accounting.policy.pools import PoolHours, fleet_hours, pool_line, pool_table


def test_table_9s_before_state_reads_back_as_percentages_of_capacity():
    # 400 A100-80GB over 720 hours: 95 % allocated, 72 % of the allocated active (Table 9, before)
    big = PoolHours("lab/a100-80gb", 400, 720, 0.95 * 288_000, 9_000, 0.95 * 288_000, 0.72 * 0.95 * 288_000,
                    memory_gb=80)  # fmt: skip
    mid = PoolHours("lab/a100-40gb", 424, 720, 0.64 * 305_280, 0, memory_gb=40)
    old = PoolHours("lab/v100", 200, 720, 0, 0, memory_gb=32)
    lines = pool_table([old, mid, big], {})
    assert [line.flavor for line in lines] == ["lab/a100-80gb", "lab/a100-40gb", "lab/v100"]  # largest memory first
    assert [(line.allocated_pct, line.active_pct) for line in lines] == [(95.0, 72.0), (64.0, None), (0.0, None)]
    assert lines[2].idle_h == 144_000 and lines[0].pending_h == 9_000


def test_change_in_points_against_the_month_before_and_gaps_are_not_capacity():
    before = PoolHours("lab/v100", 200, 720, 0, 0)
    now = PoolHours("lab/v100", 200, 696, 0.71 * 200 * 696, 0)  # a day without telemetry: 696 hours, not 720
    line = pool_line(now, before)
    assert line.capacity_h == 200 * 696 and line.allocated_pct == 71.0
    assert line.change_pp("allocated_pct") == 71.0 and line.change_pp("active_pct") is None
    assert line.as_dict()["before"]["allocated_pct"] == 0.0


def test_the_fleet_row_adds_every_pools_hours():
    pools = [PoolHours("a", 10, 100, 500, 20, 400, 300, 200.0), PoolHours("b", 30, 50, 750, 5, 0, 0, None, True)]
    fleet = fleet_hours(pools)
    assert fleet is not None
    line = pool_line(fleet)
    assert line.capacity_h == 10 * 100 + 30 * 50 and line.allocated_h == 1250 and line.pending_h == 25
    assert line.allocated_pct == pytest.approx(50.0) and line.active_pct == 75.0  # 300 of the 400 measured
    assert line.productive_estimated and fleet_hours([]) is None
