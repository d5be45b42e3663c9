"""The budget core: periods, invariants, status and forecast, Slurm's per-QOS minutes."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from quotas.policy.budget_checks import check_budget_edits
from quotas.policy.budget_effects import in_force, slurm_minutes
from quotas.policy.budgets import (
    Budget,
    BudgetAction,
    BudgetLevel,
    BudgetSpend,
    Period,
    budget_status,
    burn_down,
    carried_over,
    period_bounds,
)
from quotas.policy.violations import ViolationCode

NOW = datetime(2026, 5, 10, 12, tzinfo=UTC)
TIERS = ("P0", "P1", "P2", "P3")
PARENTS = {1: None, 2: 1, 3: 1, 4: 2}
PATHS = {1: "acme", 2: "acme/vision", 3: "acme/nlp", 4: "acme/vision/detr"}


def check(edits, budgets=None, spent=None, now=NOW):
    return check_budget_edits(
        edits, budgets=budgets or {}, parents=PARENTS, paths=PATHS, tiers=TIERS, spent=spent or {}, now=now
    )


def b(unit, hours, **kw):
    return Budget(unit, "west/a100", hours, tiers=kw.pop("tiers", ("P1", "P2")), **kw)


@pytest.mark.parametrize(
    ("at", "period", "start", "end"),
    [
        (
            datetime(2026, 5, 10, tzinfo=UTC),
            Period.MONTH,
            datetime(2026, 5, 1, tzinfo=UTC),
            datetime(2026, 6, 1, tzinfo=UTC),
        ),
        (
            datetime(2026, 12, 31, 23, tzinfo=UTC),
            Period.MONTH,
            datetime(2026, 12, 1, tzinfo=UTC),
            datetime(2027, 1, 1, tzinfo=UTC),
        ),
        (
            datetime(2026, 5, 10, tzinfo=UTC),
            Period.QUARTER,
            datetime(2026, 4, 1, tzinfo=UTC),
            datetime(2026, 7, 1, tzinfo=UTC),
        ),
        (
            datetime(2026, 11, 2, tzinfo=UTC),
            Period.QUARTER,
            datetime(2026, 10, 1, tzinfo=UTC),
            datetime(2027, 1, 1, tzinfo=UTC),
        ),
    ],
)
def test_periods_are_utc_months_and_quarters(at, period, start, end):
    assert period_bounds(period, at) == (start, end)


def test_a_valid_budget_passes():
    assert check({(2, "west/a100"): b(2, 1000)}, budgets={(1, "west/a100"): b(1, 5000)}) == []


@pytest.mark.parametrize(
    ("budget", "field", "code"),
    [
        (b(2, -5), "device_hours", ViolationCode.BUDGET_INVALID),
        (b(2, 100, carry_over_cap=200), "carry_over_cap", ViolationCode.BUDGET_INVALID),
        (b(2, 100, tiers=()), "tiers", ViolationCode.BUDGET_INVALID),
        (b(2, 100, tiers=("P7",)), "tiers", ViolationCode.BUDGET_INVALID),
        (b(2, 100, warn_percent=0), "warn_percent", ViolationCode.BUDGET_INVALID),
        (b(2, 100, oversubscription=0.5), "oversubscription", ViolationCode.BUDGET_INVALID),
        (b(2, 100, starts=date(2026, 4, 1)), "starts", ViolationCode.BUDGET_INVALID),
        (b(2, 100, starts=date(2026, 6, 15)), "starts", ViolationCode.BUDGET_INVALID),
    ],
)
def test_bad_fields_are_named_with_their_fix(budget, field, code):
    found = check({budget.key: budget})
    assert [(v.code, v.field) for v in found] == [(code, field)]
    assert found[0].hint and found[0].unit == "acme/vision"


def test_a_future_period_start_is_fine():
    assert check({(2, "west/a100"): b(2, 100, starts=date(2026, 7, 1))}) == []


def test_below_what_was_spent_is_refused_with_the_figure():
    (v,) = check({(2, "west/a100"): b(2, 300)}, spent={(2, "west/a100"): 412.4})
    assert v.code is ViolationCode.BUDGET_BELOW_SPENT
    assert "412 device-hours" in v.message and "give at least 413" in v.hint
    assert (v.limit, v.actual) == (300, 412)


def test_children_within_the_parent_times_its_oversubscription():
    parent = b(1, 1000)
    budgets = {(1, "west/a100"): parent, (3, "west/a100"): b(3, 600)}
    (v,) = check({(2, "west/a100"): b(2, 500)}, budgets=budgets)
    assert v.code is ViolationCode.BUDGETS_EXCEED_PARENT and (v.limit, v.actual) == (1000, 1100)
    assert v.unit == "acme" and "by 100" in v.hint
    over = {**budgets, (1, "west/a100"): b(1, 1000, oversubscription=1.2)}
    assert check({(2, "west/a100"): b(2, 500)}, budgets=over) == []
    # lowering the parent below its children is the same violation, seen from the parent
    (v,) = check({(1, "west/a100"): b(1, 800)}, budgets={**budgets, (2, "west/a100"): b(2, 300)})
    assert v.code is ViolationCode.BUDGETS_EXCEED_PARENT and (v.limit, v.actual) == (800, 900)


def test_children_count_per_the_parents_period():
    budgets = {(1, "west/a100"): b(1, 1000)}
    (v,) = check({(2, "west/a100"): b(2, 100, period=Period.QUARTER)}, budgets=budgets)
    assert v.code is ViolationCode.BUDGET_PERIOD_MISMATCH and v.field == "period"


def test_removing_a_budget_is_checked_too():
    budgets = {(1, "west/a100"): b(1, 1000), (2, "west/a100"): b(2, 600), (3, "west/a100"): b(3, 400)}
    assert check({(3, "west/a100"): None}, budgets=budgets) == []


def test_carry_over_is_the_unused_part_up_to_the_cap():
    budget = b(2, 1000, carry_over_cap=150)
    assert carried_over(budget, 900) == 100
    assert carried_over(budget, 100) == 150
    assert carried_over(budget, 1200) == 0
    assert carried_over(budget, None) == 0
    assert carried_over(b(2, 1000), 0) == 0


def test_status_levels_and_forecast():
    budget = b(2, 1000)
    ok = budget_status(budget, allowance=1000, spent=300, rate_per_day=10, now=NOW)
    assert ok.level is BudgetLevel.OK and ok.remaining == 700 and ok.exhausts_at is None  # 70 days: after May
    warn = budget_status(budget, allowance=1000, spent=850, rate_per_day=50, now=NOW)
    assert warn.level is BudgetLevel.WARN and warn.exhausts_at == datetime(2026, 5, 13, 12, tzinfo=UTC)
    spent = budget_status(budget, allowance=1000, spent=1000, rate_per_day=50, now=NOW)
    assert spent.level is BudgetLevel.SPENT and spent.remaining == 0 and spent.exhausts_at is None
    assert budget_status(budget, allowance=1100, spent=1000, rate_per_day=0, now=NOW).level is BudgetLevel.WARN


def test_burn_down_lines_meet_their_ends():
    budget = b(2, 310)
    daily = {date(2026, 5, d): 20.0 for d in range(1, 11)}
    lines = burn_down(budget, allowance=310, spent=210, daily=daily, rate_per_day=20, now=NOW)
    start, end = datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)
    assert lines["budget"] == [(start, 310), (end, 0)]
    assert lines["actual"][9] == (datetime(2026, 5, 10, tzinfo=UTC), 130)  # nine whole days at 20
    assert lines["actual"][-1] == (NOW, 100) == lines["forecast"][0]  # now: the evaluated spend
    status = budget_status(budget, allowance=310, spent=210, rate_per_day=20, now=NOW)
    assert lines["forecast"][-1] == (status.exhausts_at, 0) == (datetime(2026, 5, 15, 12, tzinfo=UTC), 0)
    slow = burn_down(budget, allowance=310, spent=210, daily=daily, rate_per_day=2, now=NOW)
    assert slow["forecast"][-1] == (end, pytest.approx(100 - 2 * 21.5))  # left at the period's end


def test_in_force_only_this_periods_spent_enforcing_budgets():
    start = datetime(2026, 5, 1, tzinfo=UTC)
    budgets = {
        (2, "west/a100"): b(2, 100, action=BudgetAction.HOLD),
        (3, "west/a100"): b(3, 100, action=BudgetAction.REPORT),
        (4, "west/a100"): b(4, 100, action=BudgetAction.DENY),
    }
    spends = {
        (2, "west/a100"): BudgetSpend(start, 100, 120),
        (3, "west/a100"): BudgetSpend(start, 100, 120),
        (4, "west/a100"): BudgetSpend(datetime(2026, 4, 1, tzinfo=UTC), 100, 120),
    }
    assert [x.unit_id for x in in_force(budgets, spends, NOW)] == [2]


def test_slurm_minutes_stop_the_subtree_at_its_allowance():
    start = datetime(2026, 5, 1, tzinfo=UTC)
    budgets = {(2, "west/a100"): b(2, 100, action=BudgetAction.HOLD)}
    spend = BudgetSpend(start, 100, 70, {2: (30.0, 10.0), 4: (30.0, 0.0)})
    limits = slurm_minutes(budgets, {(2, "west/a100"): spend}, {1: (2, 3), 2: (4,)}, NOW)
    # each QOS: what it counted + the 30 device-hours left
    assert limits == {
        (2, "west/a100", "guar"): 60 * 60,
        (2, "west/a100", "burst"): 40 * 60,
        (4, "west/a100", "guar"): 60 * 60,
        (4, "west/a100", "burst"): 30 * 60,
    }
    # if any one QOS alone spends the rest, Slurm stops it at the allowance
    assert all(
        limit - 60 * counted == 30 * 60
        for (uid, _, kind), limit in limits.items()
        for counted in [dict(spend.by_unit)[uid][0 if kind == "guar" else 1] if uid in spend.by_unit else 0]
    )
    # a nested hold budget takes the smaller limit; report budgets compile nothing
    budgets[(4, "west/a100")] = b(4, 40, action=BudgetAction.DENY)
    budgets[(3, "west/a100")] = b(3, 40, action=BudgetAction.REPORT)
    nested = slurm_minutes(
        budgets,
        {(2, "west/a100"): spend, (4, "west/a100"): BudgetSpend(start, 40, 30, {4: (30.0, 0.0)})},
        {1: (2, 3), 2: (4,)},
        NOW,
    )
    assert nested[(4, "west/a100", "guar")] == 40 * 60 and (3, "west/a100", "guar") not in nested


def test_default_tiers_spare_the_serving_tier_and_held_time_ends_at_release_or_period_end():
    from quotas.policy.budgets import default_tiers, held_seconds

    assert default_tiers({"P0": 100000, "P1": 1000, "P3": 10}) == ["P1", "P3"]
    assert default_tiers({"P1": 1000}) == ["P1"]
    out, end = datetime(2026, 5, 20, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)
    assert held_seconds(None, None, end, NOW) == 0
    assert held_seconds(out, datetime(2026, 5, 21, tzinfo=UTC), end, datetime(2026, 7, 1, tzinfo=UTC)) == 86400
    assert held_seconds(out, None, end, datetime(2026, 7, 1, tzinfo=UTC)) == 12 * 86400
