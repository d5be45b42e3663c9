"""The governance plan's result: ``PlanReport`` — the plan of an organisation for a period with its
backtest (the period as run and with the plan, per unit and flavor, under the cluster's borrowing
semantics and under each of ``SCENARIOS``), seen from a unit of it — and ``item_dict``, an item as the
API and the review show it. Computed by ``accounting.services.plan``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from accounting.policy.backtest import UnitOutcome, totals
from accounting.policy.plan_model import Item, Plan, Unmet

SCENARIOS = {
    "declared_lendable": "borrowers get only the lendable part each unit declares (Kueue's lendingLimit): "
    "a guarantee above it stays idle when its unit does not use it",
    "every_idle_guarantee": "borrowers get every idle guaranteed device (a Slurm cluster where a guarantee is a "
    "share, Kueue without lendingLimit), and lenders take them back by preemption within their contract",
    "whole_jobs": "borrowing is as the cluster lends, but in whole jobs: a unit borrows only multiples of its "
    "job size (the median rise of its held devices over the month) where the other figures share the pool in "
    "fractions of a device",
}
"""The borrowing semantics the plan's gain is stated under: it rests on the scheduler lending what is idle."""


@dataclass(frozen=True)
class PlanReport:
    """The plan of an organisation for ``month`` with its backtest, seen from ``unit_path`` (the
    organisation itself, or a unit in it: its items, outcomes and totals are those inside it; the
    items keep the organisation plan's numbering)."""

    unit_path: str
    month: str
    plan: Plan
    today: dict[tuple[int, str], UnitOutcome]
    planned: dict[tuple[int, str], UnitOutcome]
    observed: dict[tuple[int, str], float]
    """Device-hours each unit really held (with telemetry)."""
    step_minutes: dict[str, int]
    paths: dict[int, str]
    scenarios: dict[str, tuple[dict[tuple[int, str], UnitOutcome], dict[tuple[int, str], UnitOutcome]]] = field(
        default_factory=dict
    )
    """The same backtest under each borrowing semantics (``SCENARIOS``): month as run, month with the plan."""
    lends_idle: dict[str, bool] = field(default_factory=dict)
    """Per flavor: whether its cluster lends every idle guarantee (the semantics ``today``/``planned`` use)."""

    def inside(self, path: str) -> bool:
        return path == self.unit_path or path.startswith(self.unit_path + "/")

    def seen(self, path: str) -> PlanReport:
        """The same plan seen from ``path`` (a unit of the organisation)."""
        return replace(self, unit_path=path)

    def items(self) -> list[tuple[int, Item]]:
        """The items inside ``unit_path``, with their numbers in the organisation's plan."""
        return [(n, i) for n, i in enumerate(self.plan.items) if self.inside(i.path)]

    def _keys(self) -> list[tuple[int, str]]:
        return [k for k in self.today if self.inside(self.paths.get(k[0], ""))]

    @property
    def observed_h(self) -> float:
        return sum(self.observed.get(k, 0.0) for k in self._keys())

    @property
    def reproduce_err(self) -> float:
        """|model − observed| allocated device-hours under the month's own quotas, share of observed."""
        real = self.observed_h
        model = sum(self.today[k].allocated_h for k in self._keys())
        return abs(model - real) / real if real else 0.0

    def verdict(self, unit: int, flavor: str) -> dict[str, Any]:
        """The one verdict for a unit on a flavor: the plan's item, or why it keeps its quota."""
        for index, item in enumerate(self.plan.items):
            if item.unit == unit and item.flavor == flavor:
                return {"verdict": item.verdict.value, "item": index, "reason": item.reason}
        reason = self.plan.kept.get((unit, flavor), "no demand evidence this month")
        return {"verdict": "keep", "item": None, "reason": reason}

    def totals(self) -> dict[str, Any]:
        keys = self._keys()
        before, after = totals({k: self.today[k] for k in keys}), totals({k: self.planned[k] for k in keys})
        return {"today": before.as_dict(), "plan": after.as_dict()}

    def gain_range(self) -> dict[str, Any]:
        """The plan's gain (queued device-hours it removes from the month) under each borrowing semantics,
        with the reclaims each implies; the conservative one is the headline, and what the larger one
        relies on is said."""
        keys = self._keys()
        found: dict[str, dict[str, Any]] = {}
        for name, (before, after) in self.scenarios.items():
            b = totals({k: before[k] for k in keys if k in before})
            a = totals({k: after[k] for k in keys if k in after})
            found[name] = {
                "today_queued_h": round(b.queued_h, 1), "plan_queued_h": round(a.queued_h, 1),
                "gain_h": round(b.queued_h - a.queued_h, 1),
                "reclaimed_devices": round(sum(after[k].reclaimed for k in keys if k in after)),
                "means": SCENARIOS[name],
            }  # fmt: skip
        conservative = min(found, key=lambda n: (found[n]["gain_h"], n)) if found else None
        flavors = sorted({k[1] for k in keys})
        return {
            "scenarios": found,
            "conservative": conservative,
            "as_run": {f: ("every_idle_guarantee" if self.lends_idle.get(f) else "declared_lendable") for f in flavors},
        }

    def unmet(self) -> list[Unmet]:
        return [u for u in self.plan.unmet if self.inside(u.parent) or any(self.inside(p) for p in u.units)]

    def as_dict(self) -> dict[str, Any]:
        keys = sorted(self._keys(), key=lambda k: (self.paths.get(k[0], ""), k[1]))
        return {
            "unit_path": self.unit_path,
            "month": self.month,
            "settings": {
                "max_move_share": self.plan.settings.max_move_share,
                "max_move_min": self.plan.settings.max_move_min,
                "min_need_share": self.plan.settings.min_need_share,
            },
            "items": [item_dict(i, n) for n, i in self.items()],
            "unmet": [
                {
                    "parent": u.parent,
                    "flavor": u.flavor,
                    "devices": u.devices,
                    "queued_h": round(u.value_h, 1),
                    "units": list(u.units),
                    "would_have_to_give": u.gives,
                }
                for u in self.unmet()
            ],
            "dropped": list(self.plan.dropped),
            "backtest": {
                "totals": self.totals(),
                "gain_range": self.gain_range(),
                "reproduce_err_pct": round(100 * self.reproduce_err, 4),
                "observed_allocated_h": round(self.observed_h, 1),
                "step_minutes": self.step_minutes,
                "units": [
                    {
                        "unit_path": self.paths.get(k[0], ""),
                        "flavor": k[1],
                        **self.verdict(*k),
                        "today": self.today[k].as_dict(),
                        "plan": self.planned[k].as_dict(),
                    }
                    for k in keys
                ],
            },
        }


def item_dict(item: Item, index: int) -> dict[str, Any]:
    return {
        "index": index,
        "unit": item.unit,
        "unit_path": item.path,
        "flavor": item.flavor,
        "verdict": item.verdict.value,
        "guarantee": [item.before.guarantee, item.after.guarantee],
        "burst": [item.before.burst, item.after.burst],
        "lendable": [item.before.lendable, item.after.lendable],
        "value_h": round(item.value_h, 1),
        "value_per_device_h": round(item.value_per_device, 1),
        "reason": item.reason,
        "needs": list(item.needs),
    }
