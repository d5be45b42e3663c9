"""Recording each evaluation of the budgets' spend (the accounting app measures it, after every hourly
rollup): one row a budget and period, updated in place, and the transitions — warned, spent,
released — audited, since they change what the clusters enforce.

An evaluation writes every budget's row at once: on PostgreSQL in two statements over arrays
(``INSERT … SELECT FROM unnest`` for new periods, ``UPDATE … FROM unnest`` for the rest), elsewhere
through the ORM's bulk writes. Evaluations take one lock (an advisory transaction lock on
PostgreSQL; SQLite serialises writers itself), so two workers evaluating at once create and audit
each transition once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from quotas.models import Budget, BudgetSpend

from .audit import audit_event, audit_write

EVALUATION_LOCK = 0x41_6C_6C_6F_74_42
"""The advisory lock key evaluations hold ("AllotB")."""


@dataclass(frozen=True)
class SpendRecord:
    """One budget's evaluated period, as the accounting app measured it."""

    budget_id: int
    period_start: datetime
    period_end: datetime
    allowance: float
    carried: float
    spent: float
    rate_per_day: float
    by_unit: dict[str, list[float]]
    warn: bool


@dataclass
class _Row:
    """A BudgetSpend row as the evaluation writes it (id None: new)."""

    id: int | None
    record: SpendRecord
    warned_at: datetime | None
    exhausted_at: datetime | None
    released_at: datetime | None
    reset_at: datetime | None = None


@transaction.atomic
def budget_spend_record(*, records: Sequence[SpendRecord], now: datetime) -> dict[str, int]:
    """Store each budget's evaluated period and audit the transitions: ``budget_exhausted`` when spend
    reaches the allowance, ``budget_released`` when a spent budget is back under it (raised, or a new
    period), ``budget_warned`` when it passes its warn threshold (the webhook's warnings follow the
    audit revision). Hourly spend alone is not audited: it is derived data, rebuilt from the rollups."""
    _lock()
    starts = {r.period_start for r in records}
    existing = {
        (budget_id, start): (pk, warned, exhausted, released)
        for pk, budget_id, start, warned, exhausted, released in BudgetSpend.objects.filter(
            period_start__in=starts
        ).values_list("id", "budget_id", "period_start", "warned_at", "exhausted_at", "released_at")
    }
    new_ids = {r.budget_id for r in records if (r.budget_id, r.period_start) not in existing}
    held_before = dict(
        BudgetSpend.objects.filter(exhausted_at__isnull=False, released_at__isnull=True)
        .exclude(period_start__in=starts)
        .filter(budget_id__in=new_ids)
        .values_list("budget_id", "id")
    ) if new_ids else {}  # fmt: skip
    rows: list[_Row] = []
    released_by_period: list[tuple[int, datetime]] = []
    moves: list[tuple[str, SpendRecord, str]] = []
    counts = {"exhausted": 0, "released": 0, "warned": 0}
    for record in records:
        found = existing.get((record.budget_id, record.period_start))
        if found is None:
            row = _Row(None, record, None, None, None)
            if record.budget_id in held_before:  # a new period frees what the last one held
                released_by_period.append((held_before[record.budget_id], record.period_start))
                counts["released"] += 1
                moves.append(("budget_released", record, "a new period"))
        else:
            row = _Row(found[0], record, found[1], found[2], found[3])
        if record.warn and row.warned_at is None:
            row.warned_at = now
            counts["warned"] += 1
            moves.append(("budget_warned", record, ""))
        spent_now = record.spent >= record.allowance
        was_spent = row.exhausted_at is not None and row.released_at is None
        if spent_now and not was_spent:
            row.exhausted_at, row.released_at = now, None
            counts["exhausted"] += 1
            moves.append(("budget_exhausted", record, ""))
        elif was_spent and not spent_now:
            row.released_at = now
            counts["released"] += 1
            moves.append(("budget_released", record, ""))
        rows.append(row)
    _write(rows, now)
    if released_by_period:
        BudgetSpend.objects.bulk_update(
            [BudgetSpend(id=pk, released_at=at) for pk, at in released_by_period], ["released_at"]
        )
    if moves:
        budgets = {
            b.pk: b
            for b in Budget.objects.select_related("unit", "flavor__cluster").filter(
                pk__in={r.budget_id for _, r, _ in moves}
            )
        }
        audit_write([_transition(budgets[r.budget_id], action, r, now, why) for action, r, why in moves])
    return counts


def _lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [EVALUATION_LOCK])


COLUMNS = ("period_end", "allowance", "carried", "spent", "rate_per_day", "by_unit", "warned_at", "exhausted_at",
           "released_at", "evaluated_at")  # fmt: skip
TYPES = ("timestamptz", "float8", "float8", "float8", "float8", "jsonb", "timestamptz", "timestamptz", "timestamptz",
         "timestamptz")  # fmt: skip


def _values(row: _Row, now: datetime) -> list[Any]:
    r = row.record
    return [r.period_end, r.allowance, r.carried, r.spent, r.rate_per_day, r.by_unit, row.warned_at,
            row.exhausted_at, row.released_at, now]  # fmt: skip


def _write(rows: list[_Row], now: datetime) -> None:
    new = [r for r in rows if r.id is None]
    old = [r for r in rows if r.id is not None]
    if connection.vendor != "postgresql":
        BudgetSpend.objects.bulk_create(
            BudgetSpend(budget_id=r.record.budget_id, period_start=r.record.period_start,
                        **dict(zip(COLUMNS, _values(r, now), strict=True)))
            for r in new
        )  # fmt: skip
        BudgetSpend.objects.bulk_update(
            [BudgetSpend(id=r.id, **dict(zip(COLUMNS, _values(r, now), strict=True))) for r in old],
            list(COLUMNS),
            batch_size=500,
        )
        return
    with connection.cursor() as cursor:
        if new:
            arrays = _arrays(new, now)
            cursor.execute(
                f"INSERT INTO quotas_budgetspend (budget_id, period_start, {', '.join(COLUMNS)}) "
                f"SELECT * FROM unnest(%s::bigint[], %s::timestamptz[], "
                + ", ".join(f"%s::{t}[]" for t in TYPES)
                + ")",
                [[r.record.budget_id for r in new], [r.record.period_start for r in new], *arrays],
            )
        if old:
            sets = ", ".join(f"{c} = v.{c}" for c in COLUMNS)
            cursor.execute(
                f"UPDATE quotas_budgetspend AS s SET {sets} FROM unnest(%s::bigint[], "
                + ", ".join(f"%s::{t}[]" for t in TYPES)
                + f") AS v(id, {', '.join(COLUMNS)}) WHERE s.id = v.id",
                [[r.id for r in old], *_arrays(old, now)],
            )


def _arrays(rows: list[_Row], now: datetime) -> list[list[Any]]:
    columns: list[list[Any]] = [[] for _ in COLUMNS]
    for row in rows:
        for i, value in enumerate(_values(row, now)):
            columns[i].append(json.dumps(value) if COLUMNS[i] == "by_unit" else value)
    return columns


def _transition(budget: Budget, action: str, record: SpendRecord, now: datetime, why: str = "") -> Any:
    path, key = budget.unit.path, budget.flavor.key
    words = {"budget_exhausted": "spent", "budget_warned": f"passed {budget.warn_percent} % of"}
    word = words.get(action, "is back under")
    if why:
        word = f"is back under ({why})"
    return audit_event(
        actor=None,
        action=action,
        obj_type="budget",
        obj_id=budget.pk,
        obj_repr=f"{path} {key} budget",
        before=None,
        after={"spent": round(record.spent, 1), "allowance": round(record.allowance, 1), "action": budget.action},
        reason=f"{path} {word} its {budget.period} budget on {key}: {record.spent:,.0f} of "
        f"{record.allowance:,.0f} device-hours ({budget.get_action_display().split(':')[0].lower()})",
        unit_path=path,
    )


def budget_usage_reset(*, budget_ids: Sequence[int], at: datetime) -> int:
    """Record that Slurm's usage of these budgets' QOS was zeroed at ``at`` (the sync did it): their
    per-QOS counts start again from there."""
    return BudgetSpend.objects.filter(budget_id__in=budget_ids, period_start__lte=at, period_end__gt=at).update(
        reset_at=at, by_unit={}
    )
