"""A change request's items as stored (``ChangeRequest.changes``, JSON) and as the services take them:
quota items and GPU-hour budget items (``"kind": "budget"``), each with the version its requester saw."""

from __future__ import annotations

from typing import Any

from quotas.policy.quantity import Resource

from .budgets import BudgetChange
from .quota import QuotaChange

Item = QuotaChange | BudgetChange
BUDGET_SHOWN = ("device_hours", "period", "action", "tiers", "warn_percent", "carry_over_cap", "oversubscription")


def as_dict(change: Item) -> dict[str, Any]:
    if isinstance(change, BudgetChange):
        starts = change.starts_on
        return {
            "kind": "budget",
            "unit": change.unit_id,
            "flavor": change.flavor_id,
            **{name: getattr(change, name) for name in BUDGET_SHOWN},
            "starts_on": starts.isoformat() if hasattr(starts, "isoformat") else starts,
            "version": change.expected_version,
        }
    return {
        "unit": change.unit_id,
        "flavor": change.flavor_id,
        "resource": change.resource.value,
        "guarantee": change.guarantee,
        "burst": change.burst,
        "lendable": change.lendable,
        "version": change.expected_version,
    }


def as_change(data: dict[str, Any]) -> Item:
    if data.get("kind") == "budget":
        fields = {name: data[name] for name in (*BUDGET_SHOWN, "starts_on")}
        return BudgetChange(data["unit"], data["flavor"], **fields, expected_version=data["version"])
    return QuotaChange(
        data["unit"],
        data["flavor"],
        Resource(data["resource"]),
        data["guarantee"],
        data["burst"],
        data["lendable"],
        data["version"],
    )


def quota_items(changes: list[dict[str, Any]]) -> list[QuotaChange]:
    """The quota items of a request's stored changes (its budget items left out)."""
    return [item for item in map(as_change, changes) if isinstance(item, QuotaChange)]
