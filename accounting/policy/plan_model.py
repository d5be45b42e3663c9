"""What the governance plan is made of: its settings, each unit's demand evidence and need curve, the
items (one unit and flavor: before → after, verdict, evidence), what it cannot give (Unmet). Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from quotas.policy.quantity import Resource
from quotas.policy.snapshot import Quota, QuotaKey

from .backtest import FlavorDemand, Terms, classify

GPU = Resource.GPU


@dataclass(frozen=True)
class Settings:
    max_move_share: float = 0.5
    """At most this share of a guarantee moves in one cycle…"""
    max_move_min: int = 8
    """…or this many devices (one 8-GPU node), whichever is more."""
    min_need_share: float = 0.05
    """A device is guaranteed when needed in at least this share of the steps (p95 of need)."""

    def problems(self) -> list[str]:
        found = []
        if not 0 < self.max_move_share <= 1:
            found.append(f"max_move_share = {self.max_move_share}: give a share above 0 and at most 1 (e.g. 0.5)")
        if not 0 <= self.max_move_min <= 10_000:
            found.append(f"max_move_min = {self.max_move_min}: give 0 to 10000 devices")
        if not 0 < self.min_need_share < 1:
            found.append(f"min_need_share = {self.min_need_share}: give a share between 0 and 1 (e.g. 0.05)")
        return found


class Verdict(StrEnum):
    KEEP = "keep"
    GROW = "grow"
    SHRINK = "shrink"
    LEND_MORE = "lend more"
    MAY_BORROW = "may borrow"


@dataclass(frozen=True)
class Evidence:
    """One leaf unit on one flavor over the period."""

    unit: int
    flavor: str
    reference: Terms
    """The guarantee (burst, lendable) in force during the period."""
    curve: tuple[float, ...]
    """``curve[g]``: device-hours of need above g devices (the value of the (g+1)-th device)."""
    p95_held: int
    p95_need: int
    hours: float
    """Hours with telemetry."""
    p50_held: int = 0
    """The median of devices held (hours with telemetry)."""
    idle_share: float = 0.0
    """Of the guarantee-hours in force (hours with telemetry), the share nothing of the unit's held."""


def need_curve(need: np.ndarray, hours_per_step: float) -> tuple[float, ...]:
    """``curve[g] = Σ_t clip(need_t − g, 0, 1) × hours``: the device-hours the (g+1)-th device serves."""
    values = np.sort(np.asarray(need, dtype=np.float64))
    if values.size == 0 or values[-1] <= 0:
        return ()
    top = math.ceil(float(values[-1]))
    suffix = np.concatenate([np.cumsum(values[::-1])[::-1], [0.0]])
    levels = np.arange(top + 1, dtype=np.float64)
    idx = np.searchsorted(values, levels, side="right")
    above = suffix[idx] - levels * (values.size - idx)  # Σ max(0, need − g)
    return tuple(float(x) * hours_per_step for x in above[:-1] - above[1:])


def evidence(d: FlavorDemand) -> list[Evidence]:
    """Each unit's evidence from its series (steps without telemetry left out)."""
    bound_queue, fragment, _ = classify(d)
    need = d.held + fragment + bound_queue
    hours = d.step_minutes / 60.0
    out = []
    for i, unit in enumerate(d.units):
        mask = d.present[i]
        if not mask.any():
            continue
        mine = need[i][mask]
        held = d.held[i][mask]
        ref = d.observed.get(unit, Terms(0)).guarantee
        idle = float(np.clip(ref - held, 0, None).sum() / (ref * held.size)) if ref and held.size else 0.0
        out.append(
            Evidence(
                unit,
                d.flavor,
                d.observed.get(unit, Terms(0)),
                need_curve(mine, hours),
                math.ceil(float(np.percentile(d.held[i][mask], 95)) - 1e-9),
                math.ceil(float(np.percentile(mine, 95)) - 1e-9),
                float(mask.sum()) * hours,
                math.ceil(float(np.percentile(held, 50)) - 1e-9),
                idle,
            )
        )
    return out


@dataclass(frozen=True)
class Item:
    unit: int
    path: str
    flavor: str
    before: Quota
    after: Quota
    verdict: Verdict
    value_h: float
    """Device-hours of queued need served (grow) or of idle guarantee handed back (shrink, lend)."""
    reason: str
    needs: tuple[int, ...] = ()
    """Indexes of the items it is feasible with; empty: feasible on its own."""

    @property
    def moved(self) -> int:
        return max(
            abs(self.after.guarantee - self.before.guarantee),
            abs(self.after.lendable - self.before.lendable),
            abs(self.after.burst - self.before.burst),
            1,
        )

    @property
    def value_per_device(self) -> float:
        return self.value_h / self.moved


@dataclass(frozen=True)
class Unmet:
    parent: str
    flavor: str
    devices: int
    value_h: float
    units: tuple[str, ...]
    gives: str
    """What would have to give."""


@dataclass(frozen=True)
class Plan:
    items: tuple[Item, ...]
    kept: Mapping[tuple[int, str], str]
    """Units with evidence the plan leaves alone, and why."""
    unmet: tuple[Unmet, ...] = ()
    dropped: tuple[str, ...] = ()
    settings: Settings = field(default_factory=Settings)

    def edits(self, only: Iterable[int] | None = None) -> dict[QuotaKey, Quota]:
        chosen = range(len(self.items)) if only is None else only
        return {(self.items[i].unit, self.items[i].flavor, GPU): self.items[i].after for i in chosen}

    def terms(self) -> dict[tuple[int, str], Terms]:
        return {(i.unit, i.flavor): Terms(i.after.guarantee, i.after.burst, i.after.lendable) for i in self.items}
