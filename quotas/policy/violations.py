"""Structured violations: what broke, where, by how much, and what to do about it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum


class ViolationCode(StrEnum):
    NEGATIVE = "negative"
    LENDABLE_ABOVE_GUARANTEE = "lendable_above_guarantee"
    CHILDREN_EXCEED_GUARANTEE = "children_exceed_guarantee"
    CEILING_ABOVE_PARENT = "ceiling_above_parent"
    GUARANTEES_EXCEED_CAPACITY = "guarantees_exceed_capacity"
    RESERVATIONS_EXCEED_CAPACITY = "reservations_exceed_capacity"
    UNKNOWN_FLAVOR = "unknown_flavor"
    UNKNOWN_UNIT = "unknown_unit"
    UNKNOWN_CONTRACT = "unknown_contract"
    CYCLE = "cycle"
    KIND_ORDER = "kind_order"
    BAD_WEIGHT = "bad_weight"
    CONTRACT_INFEASIBLE = "contract_infeasible"
    TIER_INCONSISTENT = "tier_inconsistent"
    BUDGET_INVALID = "budget_invalid"
    BUDGET_BELOW_SPENT = "budget_below_spent"
    BUDGETS_EXCEED_PARENT = "budgets_exceed_parent"
    BUDGET_PERIOD_MISMATCH = "budget_period_mismatch"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant. ``limit`` is what ``actual`` must not exceed, in base units."""

    code: ViolationCode
    message: str
    hint: str
    unit: str | None = None
    flavor: str | None = None
    resource: str | None = None
    field: str | None = None
    limit: int | None = None
    actual: int | None = None

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["code"] = self.code.value
        return data


class PolicyViolationError(Exception):
    """Raised by services when a change would break invariants; nothing has been written."""

    def __init__(self, violations: tuple[Violation, ...] | list[Violation]) -> None:
        self.violations = tuple(violations)
        super().__init__("; ".join(v.message for v in self.violations) or "policy violation")

    def as_lines(self) -> str:
        """One line per violation with its fix, for command-line output."""
        return "\n".join(f"  - {v.message}. {v.hint}" for v in self.violations)
