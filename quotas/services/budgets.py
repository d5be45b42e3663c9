"""GPU-hour budgets: setting them (validated by quotas.policy.budgets, audited) and recording each
evaluation of their spend (the accounting app measures it; the transitions — warned, spent, released —
are audited, since they change what the clusters enforce)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from quotas.errors import InputError, StaleVersionError
from quotas.models import Budget, BudgetSpend, OrgUnit, WorkloadTier
from quotas.policy import budgets as bud
from quotas.policy.violations import PolicyViolationError
from quotas.selectors import BUDGET_FIELDS as FIELDS
from quotas.selectors import budget_core, budget_maps, flavor_keys

from .audit import Actor, audit_event, audit_write, require_reason
from .locks import lock_units


@dataclass(frozen=True)
class BudgetChange:
    """One budget as asked; fields left None keep the current value (or the default for a new one)."""

    unit_id: int
    flavor_id: int
    device_hours: Any = None
    period: Any = None
    action: Any = None
    tiers: Any = None
    warn_percent: Any = None
    carry_over_cap: Any = None
    oversubscription: Any = None
    starts_on: Any = None
    expected_version: int | None = None


def _int(name: str, value: Any, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InputError(name, f"{value!r} is not a whole number", f"give {what}")
    try:
        number = int(str(value).strip().replace(",", "").replace("_", ""))
    except ValueError:
        raise InputError(name, f"{value!r} is not a whole number", f"give {what}") from None
    if not low <= number <= high:
        raise InputError(name, f"{number:,} is outside {low:,}–{high:,}", f"give {what}")
    return number


def _values(change: BudgetChange, row: Budget | None) -> dict[str, Any]:
    """The budget's fields as asked, parsed; InputError naming the first bad field."""
    current = {name: getattr(row, name) for name in FIELDS} if row else {}
    asked = {name: getattr(change, name) for name in FIELDS}
    if row is None and asked["device_hours"] is None:
        raise InputError("device_hours", "a new budget needs its device-hours", "give the device-hours per period")
    out: dict[str, Any] = {}
    value = asked["device_hours"]
    out["device_hours"] = (
        current["device_hours"]
        if value is None
        else _int("device_hours", value, 0, bud.MAX_DEVICE_HOURS, "the device-hours per period (0 or more)")
    )
    value = asked["period"]
    out["period"] = current.get("period", "month") if value is None else str(value)
    if out["period"] not in {p.value for p in bud.Period}:
        raise InputError("period", f"{value!r} is not a period", "use 'month' or 'quarter' (UTC)")
    value = asked["action"]
    out["action"] = current.get("action", "report") if value is None else str(value)
    if out["action"] not in {a.value for a in bud.BudgetAction}:
        raise InputError("action", f"{value!r} is not an action", "use report, no-borrowing, hold or deny")
    value = asked["tiers"]
    if value is None:
        out["tiers"] = (
            current["tiers"] if row else bud.default_tiers(dict(WorkloadTier.objects.values_list("name", "priority")))
        )
    else:
        if isinstance(value, str):
            value = [t for t in value.replace(",", " ").split() if t]
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise InputError("tiers", f"{value!r} is not a list of tier names", 'give tier names, e.g. ["P1", "P2"]')
        out["tiers"] = sorted({t.strip().upper() for t in value})
    value = asked["warn_percent"]
    out["warn_percent"] = (
        current.get("warn_percent", 80)
        if value is None
        else _int("warn_percent", value, 1, 100, "a share from 1 to 100 %")
    )
    value = asked["carry_over_cap"]
    out["carry_over_cap"] = (
        current.get("carry_over_cap", 0)
        if value is None
        else _int("carry_over_cap", value, 0, bud.MAX_DEVICE_HOURS, "the device-hours it may carry over (0: none)")
    )
    value = asked["oversubscription"]
    if value is None:
        out["oversubscription"] = current.get("oversubscription", Decimal(1))
    else:
        try:
            out["oversubscription"] = Decimal(str(value)).quantize(Decimal("0.01"))
        except InvalidOperation:
            raise InputError(
                "oversubscription", f"{value!r} is not a number", "give a factor such as 1 or 1.25"
            ) from None
    value = asked["starts_on"]
    if value is None or value == "":
        out["starts_on"] = current.get("starts_on")
    elif isinstance(value, date):
        out["starts_on"] = value
    else:
        try:
            out["starts_on"] = date.fromisoformat(str(value))
        except ValueError:
            raise InputError("starts_on", f"{value!r} is not a date", "give the first day as YYYY-MM-DD") from None
    return out


def _row_dict(row: Budget) -> dict[str, Any]:
    data = {name: getattr(row, name) for name in FIELDS}
    data["oversubscription"] = str(data["oversubscription"])
    data["starts_on"] = data["starts_on"].isoformat() if data["starts_on"] else None
    data["version"] = row.version
    return data


def _rows_q(changes: Sequence[BudgetChange]) -> Q:
    q = Q(pk__in=[])
    for change in changes:
        q |= Q(unit_id=change.unit_id, flavor_id=change.flavor_id)
    return q


def _check(edits: Mapping[bud.BudgetKey, bud.Budget], now: datetime) -> list[bud.Violation]:
    """The core's budget checks on the edited units' neighbourhood (parents, siblings, children) with
    this period's spend of each edited budget."""
    units = {uid for uid, _ in edits}
    rows = list(OrgUnit.objects.filter(pk__in=units, archived_at__isnull=True).values("id", "parent_id"))
    missing = units - {r["id"] for r in rows}
    if missing:
        raise InputError("unit", f"unit #{min(missing)} does not exist or is archived", "pick an active unit")
    near_ids = units | {r["parent_id"] for r in rows if r["parent_id"]}
    near = OrgUnit.objects.filter(Q(pk__in=near_ids) | Q(parent_id__in=near_ids), archived_at__isnull=True)
    parents, paths = {}, {}
    for row in near.values("id", "parent_id", "path"):
        parents[row["id"]], paths[row["id"]] = row["parent_id"], row["path"]
    budgets, spends = budget_maps(units=parents)
    spent = {
        key: spends[key].spent
        for key, budget in edits.items()
        if key in spends and spends[key].period_start == bud.period_bounds(budget.period, now)[0]
    }
    tiers = WorkloadTier.objects.values_list("name", flat=True)
    return bud.check_budget_edits(
        edits, budgets=budgets, parents=parents, paths=paths, tiers=tiers, spent=spent, now=now
    )


@transaction.atomic
def budget_set_bulk(*, actor: Actor, reason: str, changes: Sequence[BudgetChange]) -> list[Budget]:
    """Set every budget in ``changes`` or none: locks each unit and its parent, checks the budget
    invariants (children within the parent, never below this period's spend, fields in range),
    writes, and audits each change (``budget_set``). A change equal to the budget writes nothing.

    Raises InputError (a field, with its fix), StaleVersionError, PolicyViolationError."""
    reason = require_reason(reason)
    if not changes:
        raise InputError("changes", "no budget changes given", "send at least one budget")
    if len({(c.unit_id, c.flavor_id) for c in changes}) != len(changes):
        raise InputError("changes", "the same unit and flavor appears twice", "send each budget once")
    keys = flavor_keys()
    for change in changes:
        if change.flavor_id not in keys:
            raise InputError("flavor", f"flavor #{change.flavor_id} does not exist", "pick an existing flavor")
    parents = dict(
        OrgUnit.objects.filter(pk__in={c.unit_id for c in changes}, archived_at__isnull=True).values_list(
            "id", "parent_id"
        )
    )
    lock_units(set(parents) | {p for p in parents.values() if p})
    rows = {(b.unit_id, b.flavor_id): b for b in Budget.objects.filter(_rows_q(changes)).select_for_update()}
    plan, edits = [], {}
    for change in changes:
        row = rows.get((change.unit_id, change.flavor_id))
        if change.expected_version is not None and change.expected_version != (row.version if row else 0):
            raise StaleVersionError(
                f"budget of unit #{change.unit_id} on {keys[change.flavor_id]}",
                change.expected_version,
                _row_dict(row) if row else {"version": 0},
            )
        values = _values(change, row)
        plan.append((change, row, values))
        edits[(change.unit_id, keys[change.flavor_id])] = budget_core(change.unit_id, keys[change.flavor_id], values)
    violations = _check(edits, timezone.now())
    if violations:
        raise PolicyViolationError(violations)
    paths = dict(OrgUnit.objects.filter(pk__in=parents).values_list("id", "path"))
    written, events = [], []
    for change, row, values in plan:
        before = _row_dict(row) if row else None
        if row is not None and all(getattr(row, n) == values[n] for n in FIELDS):
            written.append(row)
            continue
        if row is None:
            row = Budget(unit_id=change.unit_id, flavor_id=change.flavor_id, **values)
        else:
            for name, value in values.items():
                setattr(row, name, value)
            row.version += 1
        row.save()
        written.append(row)
        path = paths[change.unit_id]
        events.append(
            audit_event(
                actor=actor,
                action="budget_set",
                obj_type="budget",
                obj_id=row.pk,
                obj_repr=f"{path} {keys[change.flavor_id]} budget",
                before=before,
                after=_row_dict(row),
                reason=reason,
                unit_path=path,
            )
        )
    audit_write(events)
    return written


def budget_set(*, actor: Actor, reason: str, change: BudgetChange) -> Budget:
    return budget_set_bulk(actor=actor, reason=reason, changes=[change])[0]


@transaction.atomic
def budget_delete(*, actor: Actor, reason: str, budget: Budget) -> None:
    """Remove a budget with its spend history (the audit row keeps what it was); its children's
    budgets stand on their own. Allowed where the actor may set it (see :func:`budget_edit`)."""
    reason = require_reason(reason)
    budget = Budget.objects.select_for_update().select_related("unit", "flavor__cluster").get(pk=budget.pk)
    _may_set(actor, [budget.unit], "remove")
    before = _row_dict(budget)
    path, key = budget.unit.path, budget.flavor.key
    pk = budget.pk
    budget.delete()
    audit_write(
        [
            audit_event(
                actor=actor,
                action="budget_delete",
                obj_type="budget",
                obj_id=pk,
                obj_repr=f"{path} {key} budget",
                before=before,
                after=None,
                reason=reason,
                unit_path=path,
            )
        ]
    )


def budget_edit(*, actor: Actor, reason: str, changes: Sequence[BudgetChange]) -> list[Budget]:
    """A person's budget edit (portal or API): allowed where they may set quotas directly
    (:mod:`quotas.access`), else NotAllowedError saying to ask with a change request."""
    _may_set(actor, OrgUnit.objects.filter(pk__in={c.unit_id for c in changes}).order_by("path"), "set")
    return budget_set_bulk(actor=actor, reason=reason, changes=changes)


def _may_set(actor: Actor, units: Iterable[OrgUnit], verb: str) -> None:
    from quotas.access import NotAllowedError, led_paths, may_set_directly

    led = led_paths(actor)
    for unit in units:
        if not may_set_directly(actor, unit, led):
            raise NotAllowedError(
                f"you may not {verb} {unit.path}'s budget directly: ask for it with a change request "
                f"(a lead of a unit above it, or a platform admin, decides)"
            )


# ------------------------------------------------------------------------------------- evaluation


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


@transaction.atomic
def budget_spend_record(*, records: Sequence[SpendRecord], now: datetime) -> dict[str, int]:
    """Store each budget's evaluated period (one row a budget and period, updated in place) and audit
    the transitions: ``budget_exhausted`` when spend reaches the allowance, ``budget_released`` when a
    spent budget is back under it (raised, or a new period), ``budget_warned`` when it passes its warn
    threshold (the webhook's warnings follow the audit revision). Hourly spend alone is not audited:
    it is derived data, rebuilt from the rollups."""
    # one evaluation at a time per budget (two workers may run it at once): the second waits, then
    # sees the first one's rows and transitions, so none is created or audited twice
    list(Budget.objects.select_for_update().filter(pk__in={r.budget_id for r in records}).order_by("pk").values("pk"))
    existing = {
        (s.budget_id, s.period_start): s
        for s in BudgetSpend.objects.filter(
            budget_id__in={r.budget_id for r in records}, period_start__in={r.period_start for r in records}
        )
    }
    budgets = {
        b.pk: b
        for b in Budget.objects.select_related("unit", "flavor__cluster").filter(pk__in={r.budget_id for r in records})
    }
    held_before = {
        s.budget_id: s
        for s in BudgetSpend.objects.filter(
            budget_id__in={r.budget_id for r in records if (r.budget_id, r.period_start) not in existing},
            exhausted_at__isnull=False,
            released_at__isnull=True,
        )
    }
    create, update, events = [], [], []
    counts = {"exhausted": 0, "released": 0, "warned": 0}
    for record in records:
        row = existing.get((record.budget_id, record.period_start))
        if row is None:
            row = BudgetSpend(budget_id=record.budget_id, period_start=record.period_start)
            create.append(row)
            last = held_before.get(record.budget_id)
            if last is not None:  # a new period frees what the last one held
                last.released_at = record.period_start
                update.append(last)
                counts["released"] += 1
                events.append(_transition(budgets[record.budget_id], "budget_released", record, now, "a new period"))
        else:
            update.append(row)
        row.period_end, row.allowance, row.carried = record.period_end, record.allowance, record.carried
        row.spent, row.rate_per_day, row.by_unit, row.evaluated_at = (
            record.spent,
            record.rate_per_day,
            record.by_unit,
            now,
        )
        budget = budgets[record.budget_id]
        if record.warn and row.warned_at is None:
            row.warned_at = now
            counts["warned"] += 1
            events.append(_transition(budget, "budget_warned", record, now))
        spent_now = record.spent >= record.allowance
        was_spent = row.exhausted_at is not None and row.released_at is None
        if spent_now and not was_spent:
            row.exhausted_at, row.released_at = now, None
            counts["exhausted"] += 1
            events.append(_transition(budget, "budget_exhausted", record, now))
        elif was_spent and not spent_now:
            row.released_at = now
            counts["released"] += 1
            events.append(_transition(budget, "budget_released", record, now))
    BudgetSpend.objects.bulk_create(create)
    BudgetSpend.objects.bulk_update(
        update,
        ["period_end", "allowance", "carried", "spent", "rate_per_day", "by_unit", "evaluated_at", "warned_at",
         "exhausted_at", "released_at"],
    )  # fmt: skip
    audit_write(events)
    return counts


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
