"""GPU-hour budgets: setting them (validated by quotas.policy.budgets, audited). Recording each
evaluation of their spend is quotas.services.budget_spend."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from quotas.errors import InputError, StaleVersionError
from quotas.models import Budget, OrgUnit, WorkloadTier
from quotas.policy import budgets as bud
from quotas.policy.budget_checks import check_budget_edits
from quotas.policy.violations import PolicyViolationError, Violation
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
    text = str(value).strip().replace(",", "")
    if not (text.isascii() and text.removeprefix("-").isdigit()):  # int() also reads "٤٧", "４７" and "1_0"
        raise InputError(name, f"{value!r} is not a whole number written with the digits 0-9", f"give {what}")
    number = int(text)
    if not low <= number <= high:
        raise InputError(name, f"{number:,} is outside {low:,}–{high:,}", f"give {what}")
    return number


def _values(change: BudgetChange, row: Budget | None) -> dict[str, Any]:
    """The budget's fields as asked, parsed; one InputError naming every bad field with its fix (the
    form had shown only the first, so a person fixed one field a round)."""
    current = {name: getattr(row, name) for name in FIELDS} if row else {}
    asked = {name: getattr(change, name) for name in FIELDS}
    if row is None and asked["device_hours"] is None:
        raise InputError("device_hours", "a new budget needs its device-hours", "give the device-hours per period")
    out: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for name, parse in _PARSERS.items():
        try:
            out[name] = parse(asked[name], current, row)
        except InputError as exc:
            errors.update(exc.errors)
    if errors:
        raise InputError.from_dict(errors)
    if out["starts_on"] is not None and not FIRST_DAY <= out["starts_on"] <= LAST_DAY:
        raise InputError(
            "starts_on", f"{out['starts_on']} is out of range", f"give a day from {FIRST_DAY} to {LAST_DAY}"
        )
    return out


def _device_hours(value: Any, current: dict[str, Any], row: Budget | None) -> int:
    if value is None:
        return int(current["device_hours"])
    return _int("device_hours", value, 0, bud.MAX_DEVICE_HOURS, "the device-hours per period (0 or more)")


def _period(value: Any, current: dict[str, Any], row: Budget | None) -> str:
    period = current.get("period", "month") if value is None else str(value)
    if period not in {p.value for p in bud.Period}:
        raise InputError("period", f"{value!r} is not a period", "use 'month' or 'quarter' (UTC)")
    return period


def _action(value: Any, current: dict[str, Any], row: Budget | None) -> str:
    action = current.get("action", "report") if value is None else str(value)
    if action not in {a.value for a in bud.BudgetAction}:
        raise InputError("action", f"{value!r} is not an action", "use report, no-borrowing, hold or deny")
    return action


def _tiers(value: Any, current: dict[str, Any], row: Budget | None) -> list[str]:
    if value is None:
        if row:
            return list(current["tiers"])
        return bud.default_tiers(dict(WorkloadTier.objects.values_list("name", "priority")))
    if isinstance(value, str):
        value = [t for t in value.replace(",", " ").split() if t]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InputError("tiers", f"{value!r} is not a list of tier names", 'give tier names, e.g. ["P1", "P2"]')
    return sorted({t.strip().upper() for t in value})


def _warn_percent(value: Any, current: dict[str, Any], row: Budget | None) -> int:
    if value is None:
        return int(current.get("warn_percent", 80))
    return _int("warn_percent", value, 1, 100, "a share from 1 to 100 %")


def _carry_over_cap(value: Any, current: dict[str, Any], row: Budget | None) -> int:
    if value is None:
        return int(current.get("carry_over_cap", 0))
    return _int("carry_over_cap", value, 0, bud.MAX_DEVICE_HOURS, "the device-hours it may carry over (0: none)")


def _oversubscription(value: Any, current: dict[str, Any], row: Budget | None) -> Decimal:
    if value is None:
        return Decimal(current.get("oversubscription", Decimal(1)))
    try:
        factor = Decimal(str(value).strip())
        if not factor.is_finite() or not str(value).strip().isascii():  # "NaN", "Infinity", "١٫٢"
            raise InvalidOperation
        return factor.quantize(Decimal("0.01"))
    except InvalidOperation:
        raise InputError(
            "oversubscription",
            f"{value!r} is not a number",
            f"give a factor from 1 to {bud.MAX_OVERSUBSCRIPTION:g}, such as 1 or 1.25",
        ) from None


def _starts_on(value: Any, current: dict[str, Any], row: Budget | None) -> date | None:
    if value is None or value == "":
        return current.get("starts_on")
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise InputError("starts_on", f"{value!r} is not a date", "give the first day as YYYY-MM-DD") from None


_PARSERS: dict[str, Callable[[Any, dict[str, Any], Budget | None], Any]] = {
    "device_hours": _device_hours,
    "period": _period,
    "action": _action,
    "tiers": _tiers,
    "warn_percent": _warn_percent,
    "carry_over_cap": _carry_over_cap,
    "oversubscription": _oversubscription,
    "starts_on": _starts_on,
}


FIRST_DAY, LAST_DAY = date(2000, 1, 1), date(2999, 12, 1)
"""The days a budget may start on: its periods (and their ends) must be dates Python and PostgreSQL hold."""


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


def _check(edits: Mapping[bud.BudgetKey, bud.Budget], now: datetime) -> list[Violation]:
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
    return check_budget_edits(edits, budgets=budgets, parents=parents, paths=paths, tiers=tiers, spent=spent, now=now)


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
    keys = _flavors(changes)
    parents = dict(
        OrgUnit.objects.filter(pk__in={c.unit_id for c in changes}, archived_at__isnull=True).values_list(
            "id", "parent_id"
        )
    )
    lock_units(set(parents) | {p for p in parents.values() if p})
    rows = {(b.unit_id, b.flavor_id): b for b in Budget.objects.filter(_rows_q(changes)).select_for_update()}
    for change in changes:
        row = rows.get((change.unit_id, change.flavor_id))
        if change.expected_version is not None and change.expected_version != (row.version if row else 0):
            raise StaleVersionError(
                f"budget of unit #{change.unit_id} on {keys[change.flavor_id]}",
                change.expected_version,
                _row_dict(row) if row else {"version": 0},
            )
    plan, edits = _plan(changes, rows, keys)
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


def _flavors(changes: Sequence[BudgetChange]) -> dict[int, str]:
    keys = flavor_keys()
    for change in changes:
        if change.flavor_id not in keys:
            raise InputError("flavor", f"flavor #{change.flavor_id} does not exist", "pick an existing flavor")
    return keys


def _plan(
    changes: Sequence[BudgetChange], rows: Mapping[tuple[int, int], Budget], keys: Mapping[int, str]
) -> tuple[list[tuple[BudgetChange, Budget | None, dict[str, Any]]], dict[bud.BudgetKey, bud.Budget]]:
    """Each change's parsed values (InputError naming the first bad field) and the budgets as edited."""
    plan, edits = [], {}
    for change in changes:
        row = rows.get((change.unit_id, change.flavor_id))
        values = _values(change, row)
        plan.append((change, row, values))
        edits[(change.unit_id, keys[change.flavor_id])] = budget_core(change.unit_id, keys[change.flavor_id], values)
    return plan, edits


def budget_proposal(changes: Sequence[BudgetChange]) -> tuple[list[BudgetChange], list[Violation]]:
    """``changes`` as they would be set now — every field parsed (InputError naming the first bad
    one), with the version each is based on — and what setting them would break. Writes nothing:
    change requests record the first and show the second."""
    keys = _flavors(changes)
    rows = {(b.unit_id, b.flavor_id): b for b in Budget.objects.filter(_rows_q(changes))}
    plan, edits = _plan(changes, rows, keys)
    full = [
        BudgetChange(
            change.unit_id,
            change.flavor_id,
            **{**values, "oversubscription": str(values["oversubscription"])},
            expected_version=change.expected_version
            if change.expected_version is not None
            else (row.version if row else 0),
        )
        for change, row, values in plan
    ]
    return full, _check(edits, timezone.now())


def budget_set(*, actor: Actor, reason: str, change: BudgetChange) -> Budget:
    return budget_set_bulk(actor=actor, reason=reason, changes=[change])[0]


@transaction.atomic
def budget_delete(*, actor: Actor, reason: str, budget: Budget, expected_version: int) -> None:
    """Remove a budget with its spend history (the audit row keeps what it was); its children's
    budgets stand on their own. Allowed where the actor may set it (see :func:`budget_edit`).
    ``expected_version`` is the version the person saw: a budget changed since is not removed
    (StaleVersionError), as an edit of it would not be saved."""
    reason = require_reason(reason)
    budget = Budget.objects.select_for_update().select_related("unit", "flavor__cluster").get(pk=budget.pk)
    _may_set(actor, [budget.unit], "remove")
    if expected_version != budget.version:
        raise StaleVersionError(
            f"budget of {budget.unit.path} on {budget.flavor.key}", expected_version, _row_dict(budget)
        )
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
    require_versions(changes)
    _may_set(actor, OrgUnit.objects.filter(pk__in={c.unit_id for c in changes}).order_by("path"), "set")
    return budget_set_bulk(actor=actor, reason=reason, changes=changes)


def require_versions(changes: Sequence[BudgetChange]) -> None:
    """A person's edit names the version it was made on (0: a new budget); without it a change made on
    an old page would overwrite one made meanwhile. InputError naming the field and the fix."""
    if any(c.expected_version is None for c in changes):
        raise InputError(
            "version",
            "the edit does not say which version of the budget it was made on",
            "send the budget's version from GET (0 for a new one), or reload the page and make the change again",
        )


def _may_set(actor: Actor, units: Iterable[OrgUnit], verb: str) -> None:
    from quotas.access import NotAllowedError, led_paths, may_set_directly

    led = led_paths(actor)
    for unit in units:
        if not may_set_directly(actor, unit, led):
            raise NotAllowedError(
                f"you may not {verb} {unit.path}'s budget directly: ask for it with a change request "
                f"(a lead of a unit above it, or a platform admin, decides)"
            )
