"""What a spent budget does on each scheduler: which budgets are in force, the subtree and tiers they
cover, Slurm's per-QOS ``GrpTRESMins``, and each unit's effect (no borrowing, hold, deny). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from .budgets import Budget, BudgetAction, BudgetKey, BudgetSpend, period_bounds


def in_force(
    budgets: Mapping[BudgetKey, Budget], spends: Mapping[BudgetKey, BudgetSpend], now: datetime
) -> list[Budget]:
    """Budgets spent this period whose action enforces something, sorted."""
    found = []
    for key, budget in sorted(budgets.items()):
        spend = spends.get(key)
        if budget.action is BudgetAction.REPORT or spend is None or not spend.exhausted:
            continue
        if spend.period_start != period_bounds(budget.period, now)[0]:
            continue  # last period's state: the new period starts afresh
        if budget.starts is not None and budget.starts > now.date():
            continue
        found.append(budget)
    return found


def subtree_ids(children: Mapping[int | None, Iterable[int]], unit_id: int) -> tuple[int, ...]:
    """``unit_id`` and every unit under it, sorted: what a budget on it counts and stops."""
    found, pending = [], [unit_id]
    while pending:
        uid = pending.pop()
        found.append(uid)
        pending.extend(children.get(uid, ()))
    return tuple(sorted(found))


def covers_all(budget: Budget, tiers: Iterable[str]) -> bool:
    return set(tiers) <= set(budget.tiers)


def slurm_minutes(
    budgets: Mapping[BudgetKey, Budget],
    spends: Mapping[BudgetKey, BudgetSpend],
    children: Mapping[int | None, Iterable[int]],
    now: datetime,
) -> dict[tuple[int, str, str], int]:
    """``GrpTRESMins`` (device-minutes) per (unit id, flavor, "guar" | "burst") QOS under a hold or
    deny budget.

    A Slurm job runs under one QOS, and a unit's jobs under its guarantee or its burst QOS (its
    children's under theirs), so no single QOS sees a budget's whole spend. Each QOS of the budget's
    subtree gets ``what it counted since its usage was reset + what is left of the budget``: Slurm
    stops it exactly when the subtree's spend reaches the allowance, up to what the other QOS spent
    since the last evaluation (re-evaluated at each rollup). Burst QOS count their usage × their
    ``UsageFactor``, as the budget counts borrowed hours, so the two stay consistent. A QOS under
    several budgets gets the smallest.
    """
    limits: dict[tuple[int, str, str], int] = {}
    for key, budget in sorted(budgets.items()):
        if budget.action not in (BudgetAction.HOLD, BudgetAction.DENY):
            continue
        if budget.starts is not None and budget.starts > now.date():
            continue
        spend = spends.get(key)
        current = spend is not None and spend.period_start == period_bounds(budget.period, now)[0]
        allowance = spend.allowance if spend is not None and current else float(budget.device_hours)
        left = max(0.0, allowance - (spend.spent if spend is not None and current else 0.0))
        by_unit = spend.by_unit if spend is not None and current else {}
        for uid in subtree_ids(children, budget.unit_id):
            within, borrowed = by_unit.get(uid, (0.0, 0.0))
            for kind, counted in (("guar", within), ("burst", borrowed)):
                minutes = int((counted + left) * 60)
                qos = (uid, budget.flavor, kind)
                limits[qos] = min(limits.get(qos, minutes), minutes)
    return limits


@dataclass(frozen=True, slots=True)
class Effect:
    """What a spent budget changes on the clusters until its period ends or it is raised."""

    unit_id: int
    flavor: str
    action: BudgetAction
    units: tuple[int, ...]
    """The budget's unit and everything under it."""
    queue_hold: bool
    """``hold`` covering every tier: the subtree's LocalQueues stop (``stopPolicy: Hold``); a hold
    that spares a tier is enforced at admission instead (a LocalQueue holds all its workloads)."""
    tiers: tuple[str, ...]
    resets: datetime


def effects(
    budgets: Mapping[BudgetKey, Budget],
    spends: Mapping[BudgetKey, BudgetSpend],
    children: Mapping[int | None, Iterable[int]],
    tiers: Iterable[str],
    now: datetime,
) -> list[Effect]:
    """Every spent budget's effect now, sorted (unit, flavor)."""
    names = tuple(tiers)
    found = []
    for budget in in_force(budgets, spends, now):
        found.append(
            Effect(
                budget.unit_id,
                budget.flavor,
                budget.action,
                subtree_ids(children, budget.unit_id),
                budget.action is BudgetAction.HOLD and covers_all(budget, names),
                budget.tiers,
                period_bounds(budget.period, now)[1],
            )
        )
    return found
