"""The detectors, pure: each fires on the numbers that define it and stays quiet just outside them;
every finding carries its evidence, cost and a suggestion that never takes a guarantee away by itself."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from accounting.policy.findings import (
    FindingKind,
    Thresholds,
    UnitWindow,
    demand_above_guarantee,
    idle_guarantees,
    percentile,
)
from accounting.policy.hold_findings import (
    QuietSpan,
    Reclaim,
    ReservationWindow,
    StuckWorkload,
    contracts_not_honoured,
    idle_reservations,
    stuck_reservations,
    zombie_allocations,
)

T0 = datetime(2020, 5, 1, tzinfo=UTC)
T1 = T0 + timedelta(days=5)
TH = Thresholds()


def window(**changes: object) -> UnitWindow:
    base = UnitWindow(
        unit=7, flavor=2, path="acme/earth/vcira", flavor_key="helios-earth/v100", guarantee=24, lendable=0,
        children_guarantee=0, guarantee_h=24 * 120, within_h=0.02 * 24 * 120, borrowed_h=0, lent_h=0, pending_h=0,
        hours=120, expected_hours=120, hours_demand_above=0, p95_held=1.0, p95_demand=1.0, others_waiting_hours=110,
        price=Decimal("1.2"),
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def test_an_idle_guarantee_while_others_wait_suggests_lending_first() -> None:
    (found,) = idle_guarantees([window()], TH, T0, T1)
    assert found.kind is FindingKind.IDLE_GUARANTEE and found.key == "idle_guarantee:7:2"
    assert found.action == {"unit": 7, "flavor": 2, "lendable": 24}  # the guarantee stays
    assert "used 2% of its guarantee" in found.summary and found.evidence["others_waiting_hours"] == 110
    assert found.cost == Decimal("1.2") * Decimal(str(round(24 * 120 * 0.98, 1)))  # the idle device-hours × price
    assert not found.partial


def test_a_fully_lendable_idle_guarantee_goes_to_review_never_below_its_children() -> None:
    (found,) = idle_guarantees([window(lendable=24, p95_held=3.2, children_guarantee=8)], TH, T0, T1)
    assert found.action == {"unit": 7, "flavor": 2, "guarantee": 8, "lendable": 8}
    assert "Review the guarantee" in found.suggestion


def test_idle_guarantee_stays_quiet_at_the_threshold_or_when_nobody_waits() -> None:
    assert idle_guarantees([window(within_h=0.2 * 24 * 120)], TH, T0, T1) == []
    assert idle_guarantees([window(others_waiting_hours=0)], TH, T0, T1) == []
    assert idle_guarantees([window(hours=0)], TH, T0, T1) == []


def test_a_gap_in_telemetry_marks_the_evidence_partial() -> None:
    (found,) = idle_guarantees([window(hours=90)], TH, T0, T1)
    assert found.partial and found.evidence["hours_with_telemetry"] == 90


def test_demand_above_guarantee_suggests_growing_it() -> None:
    busy = window(path="acme/earth/vcpDC", guarantee=56, within_h=55 * 120, guarantee_h=56 * 120, pending_h=900,
                  hours_demand_above=96, p95_demand=71.3, borrowed_h=10)  # fmt: skip
    (found,) = demand_above_guarantee([busy], TH, T0, T1)
    assert found.action == {"unit": 7, "flavor": 2, "guarantee": 72}
    assert found.evidence["share_above"] == 0.8
    assert demand_above_guarantee([replace(busy, hours_demand_above=29)], TH, T0, T1) == []  # below 25 %
    assert demand_above_guarantee([replace(busy, borrowed_h=56 * 120 * 0.1)], TH, T0, T1) == []  # it borrows


def test_an_unneeded_reservation_is_found_with_what_could_be_freed() -> None:
    reserved = ReservationWindow(2, "west/a100", reserved=10, physical=120, headroom=10, peak_held=93.5, hours=168,
                                 expected_hours=168, price=Decimal(2))  # fmt: skip
    (found,) = idle_reservations([reserved], TH, T0, T1)
    assert "6 of the 10 devices" in found.suggestion and found.cost == Decimal(2 * 10 * 168)
    assert idle_reservations([replace(reserved, peak_held=100.5)], TH, T0, T1) == []


def test_zombies_need_the_whole_timeout() -> None:
    span = QuietSpan(7, 2, "acme/nlp", "west/a100", T0, T0 + timedelta(hours=3), held_h=24, active_h=0.3,
                     workloads=["nlp/train-1"], price=None)  # fmt: skip
    (found,) = zombie_allocations([span], TH)
    assert found.cost is None and found.evidence["workloads"] == ["nlp/train-1"]  # no price: unknown, not zero
    assert zombie_allocations([replace(span, end=T0 + timedelta(minutes=59))], TH) == []


def test_a_workload_holding_quota_after_eviction_is_stuck_after_the_timeout() -> None:
    stuck = StuckWorkload(4, 7, 2, "ml/raywork", "acme/ml", 900, T0, "DeactivatedDueToAdmissionCheck", Decimal(1))
    (found,) = stuck_reservations([stuck], TH, T0 + timedelta(hours=2))
    assert found.cost == Decimal(1800) and "keeps 900 devices of quota reserved 2.0 h" in found.summary
    assert stuck_reservations([stuck], TH, T0 + timedelta(minutes=9)) == []


def test_reclaims_slower_than_the_promise_are_grouped_per_lender_and_borrower() -> None:
    fast = Reclaim(1, "acme/nlp", 2, "acme/vision", 3, "west/a100", T0, T0 + timedelta(minutes=10),
                   T0 + timedelta(minutes=9), promised_s=900, devices=8, price=None)  # fmt: skip
    slow = replace(fast, admitted=T0 + timedelta(minutes=40))
    slower = replace(fast, submitted=T0 + timedelta(hours=1), admitted=T0 + timedelta(hours=2))
    (found,) = contracts_not_honoured([fast, slow, slower], T0, T1)
    assert found.evidence["reclaims"] == 2 and found.evidence["longest_wait_s"] == 3600
    assert found.evidence["device_hours_beyond_promise"] == round(8 * (25 + 45) / 60, 2)


def test_thresholds_out_of_range_are_named() -> None:
    problems = Thresholds(idle_used_below=20, zombie_minutes=0).problems()
    assert problems == [
        "idle_used_below = 20: give a share between 0 and 1 (e.g. 0.2 for 20 %)",
        "zombie_minutes = 0: give 1 minute to 7 days",
    ]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([5, 1, 3, 2, 4], 0.95) == 5 and percentile([], 0.95) == 0 and percentile([1, 2], 0.5) == 1
