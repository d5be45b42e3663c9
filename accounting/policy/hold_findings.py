"""Findings about capacity held and promises kept: idle reservations, zombie allocations (devices held
without activity), Kueue workloads stuck holding their reservation, and reclaims beyond the contract's
promise. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from .findings import FindingKind, Found, Thresholds, money_at


@dataclass(frozen=True)
class ReservationWindow:
    flavor: int
    flavor_key: str
    reserved: int
    physical: int
    headroom: int
    peak_held: float
    """The most devices all units held in one hour of the window (hourly average)."""
    hours: int
    expected_hours: int
    price: Decimal | None


def idle_reservations(
    windows: Iterable[ReservationWindow], th: Thresholds, start: datetime, end: datetime
) -> list[Found]:
    """Non-preemptible reservations the window never needed: even at its busiest hour the units held no
    more than the capacity outside them, so the reserved devices only ever sat idle."""
    found = []
    for w in windows:
        outside = w.physical - w.reserved - w.headroom
        if w.reserved <= 0 or not w.hours or w.peak_held > outside:
            continue
        spare = min(w.reserved, math.floor(outside - w.peak_held))
        found.append(
            Found(
                FindingKind.IDLE_RESERVATION,
                f"{FindingKind.IDLE_RESERVATION}:{w.flavor}",
                None,
                w.flavor,
                start,
                end,
                f"{w.reserved} reserved devices on {w.flavor_key} were never needed: the busiest hour held "
                f"{w.peak_held:.1f} of the {outside} outside reservations",
                {
                    "reserved": w.reserved,
                    "peak_held": round(w.peak_held, 1),
                    "capacity_outside": outside,
                    "hours_with_telemetry": w.hours,
                    "hours_in_window": w.expected_hours,
                    "partial": w.hours < w.expected_hours,
                },
                money_at(w.price, w.reserved * w.hours),
                f"Review the reservations on {w.flavor_key}: {spare} of the {w.reserved} devices could become "
                f"guarantees or lendable capacity.",
                None,
                w.hours < w.expected_hours,
            )
        )
    return found


@dataclass(frozen=True)
class QuietSpan:
    """Consecutive hours a unit held devices on a flavor with measured activity below the threshold."""

    unit: int
    flavor: int
    path: str
    flavor_key: str
    start: datetime
    end: datetime
    held_h: float
    active_h: float
    workloads: Sequence[str]
    """The unit's workloads that held devices through the whole span."""
    price: Decimal | None


def zombie_allocations(spans: Iterable[QuietSpan], th: Thresholds) -> list[Found]:
    found = []
    for s in spans:
        minutes = (s.end - s.start).total_seconds() / 60
        if minutes < th.zombie_minutes or s.held_h <= 0:
            continue
        share = s.active_h / s.held_h
        found.append(
            Found(
                FindingKind.ZOMBIE_ALLOCATION,
                f"{FindingKind.ZOMBIE_ALLOCATION}:{s.unit}:{s.flavor}",
                s.unit,
                s.flavor,
                s.start,
                s.end,
                f"{s.path} held {s.held_h / max(minutes / 60, 1e-9):.1f} devices on {s.flavor_key} for "
                f"{minutes / 60:.0f} h with {share:.0%} activity",
                {
                    "held_h": round(s.held_h, 1),
                    "active_h": round(s.active_h, 2),
                    "active_share": round(share, 4),
                    "workloads": list(s.workloads)[:20],
                },
                money_at(s.price, s.held_h - s.active_h),
                "Ask the owners of the workloads listed whether they still run; stop or checkpoint the idle ones.",
            )
        )
    return found


@dataclass(frozen=True)
class StuckWorkload:
    record: int
    unit: int | None
    flavor: int | None
    name: str
    path: str
    devices: int
    evicted_at: datetime
    reason: str
    price: Decimal | None


def stuck_reservations(workloads: Iterable[StuckWorkload], th: Thresholds, now: datetime) -> list[Found]:
    """Kueue Workloads evicted ``stuck_minutes`` ago or more that still hold their quota reservation
    (QuotaReserved=True, no pods): the quota is counted as used while nothing runs."""
    found = []
    for w in workloads:
        if now - w.evicted_at < timedelta(minutes=th.stuck_minutes):
            continue
        hours = (now - w.evicted_at).total_seconds() / 3600
        found.append(
            Found(
                FindingKind.STUCK_RESERVATION,
                f"{FindingKind.STUCK_RESERVATION}:{w.record}",
                w.unit,
                w.flavor,
                w.evicted_at,
                now,
                f"{w.name} ({w.path or 'no unit'}) keeps {w.devices} devices of quota reserved {hours:.1f} h after "
                f"it was evicted ({w.reason})",
                {
                    "devices": w.devices,
                    "evicted_at": w.evicted_at.isoformat(),
                    "reason": w.reason,
                    "hours": round(hours, 2),
                },
                money_at(w.price, w.devices * hours),
                "Delete or deactivate the Workload (its admission check rejected it or it lost its pods); Kueue "
                "releases the reservation once it is finished or inactive.",
            )
        )
    return found


@dataclass(frozen=True)
class Reclaim:
    """A workload inside its unit's guarantee that asked while devices of that guarantee were lent: timed from
    its ask to its admission. ``preempted``: when the borrower was preempted for it; None when no borrower
    was (the lent devices stayed with borrowers until they finished: a reclaim that never happened)."""

    lender: int
    lender_path: str
    borrower: int | None
    borrower_path: str
    flavor: int
    flavor_key: str
    submitted: datetime
    admitted: datetime
    preempted: datetime | None
    promised_s: int
    devices: float
    """What it asked for: devices, or GPU-equivalents on a shared flavor."""
    price: Decimal | None
    contract: str = ""


def contracts_not_honoured(reclaims: Iterable[Reclaim], start: datetime, end: datetime) -> list[Found]:
    """Reclaims that took longer than the lender's contract promises (reclaim within), per lender and
    borrower: the guarantee was not delivered in time."""
    grouped: dict[tuple[int, int | None, int], list[Reclaim]] = {}
    for r in reclaims:
        if (r.admitted - r.submitted).total_seconds() > r.promised_s:
            grouped.setdefault((r.lender, r.borrower, r.flavor), []).append(r)
    found = []
    for (lender, borrower, flavor), late in sorted(grouped.items(), key=lambda kv: str(kv[0])):
        first = late[0]
        waits = sorted((r.admitted - r.submitted).total_seconds() for r in late)
        beyond_h = sum(((r.admitted - r.submitted).total_seconds() - r.promised_s) * r.devices for r in late) / 3600
        found.append(
            Found(
                FindingKind.CONTRACT_NOT_HONOURED,
                f"{FindingKind.CONTRACT_NOT_HONOURED}:{lender}:{borrower}:{flavor}",
                lender,
                flavor,
                start,
                end,
                f"{first.lender_path} waited up to {waits[-1] / 60:.0f} min for its guarantee on {first.flavor_key} "
                f"(promised {first.promised_s / 60:.0f} min) while {first.borrower_path or 'a borrower'} "
                + ("was reclaimed" if first.preempted else "kept its lent devices: no borrower was preempted"),
                {
                    "reclaims": len(late),
                    "longest_wait_s": int(waits[-1]),
                    "median_wait_s": int(waits[len(waits) // 2]),
                    "promised_s": first.promised_s,
                    "borrower": first.borrower_path,
                    "device_hours_beyond_promise": round(beyond_h, 2),
                    "never_preempted": sum(1 for r in late if r.preempted is None),
                },
                money_at(first.price, beyond_h),
                "Check the borrower's preemption settings and grace period against the lender's contract "
                "(reclaim within ≥ grace period + exit time + a scheduling pass), or lengthen the promise.",
            )
        )
    return found
