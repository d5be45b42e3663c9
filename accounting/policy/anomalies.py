"""Consumption anomalies (seed 8.12.1): a unit's device-hours suddenly far above its own norm, or its
measured activity gone to zero while it still holds its allocations.

The norm is the unit's own: its mean over ``anomaly_weeks`` weeks before, for the same hours of the
week as the window (a team that trains every weekend is not anomalous on a Saturday). Two signals:

- **spike**: device-hours allocated in the window ≥ ``anomaly_factor`` × the norm, and at least
  ``anomaly_min_device_hours`` above it — "runaway submission script, or an intended experiment?";
- **drop**: measured activity (DCGM) in the window under 5 % of its norm while the allocated hours
  stay at least half of theirs — devices held by work that stopped doing anything.

The norm needs at least two of the weeks with data; a unit new to the flavor has none yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accounting.policy.findings import FindingKind, Found, Thresholds

DROP_BELOW = 0.05
HELD_AT_LEAST = 0.5


@dataclass(frozen=True)
class ConsumptionWindow:
    unit: int
    unit_path: str
    flavor: int
    flavor_key: str
    allocated_h: float
    """In the window."""
    active_h: float | None
    """Measured activity in the window; None: not measured."""
    weekly_allocated: tuple[float, ...]
    """Each earlier week's same hours (most recent first); weeks without data are left out."""
    weekly_active: tuple[float, ...] = ()

    @property
    def norm_h(self) -> float | None:
        return sum(self.weekly_allocated) / len(self.weekly_allocated) if len(self.weekly_allocated) >= 2 else None

    @property
    def active_norm_h(self) -> float | None:
        return sum(self.weekly_active) / len(self.weekly_active) if len(self.weekly_active) >= 2 else None


def consumption_anomalies(
    windows: Iterable[ConsumptionWindow],
    th: Thresholds,
    start: datetime,
    end: datetime,
    daily: Mapping[tuple[int, int], list[list[Any]]] | None = None,
) -> list[Found]:
    """The spikes and drops in ``windows`` (see the module docstring); ``daily`` adds each one's
    evidence chart rows (day, held, queued)."""
    found = []
    for w in windows:
        norm = w.norm_h
        if norm is None:
            continue
        hours = max(1.0, (end - start).total_seconds() / 3600)
        chart = {"daily": (daily or {}).get((w.unit, w.flavor), []), "norm_devices": round(norm / hours, 2)}
        evidence = {
            "window_hours": round(hours), "allocated_h": round(w.allocated_h, 1), "norm_h": round(norm, 1),
            "weeks": len(w.weekly_allocated), "factor": round(w.allocated_h / norm, 1) if norm > 0 else None, **chart,
        }  # fmt: skip
        name = w.unit_path.rsplit("/", 1)[-1]
        if w.allocated_h >= th.anomaly_factor * norm and w.allocated_h - norm >= th.anomaly_min_device_hours:
            times = f"{w.allocated_h / norm:.1f}×" if norm > 0 else "from nothing to"
            found.append(
                Found(
                    FindingKind.CONSUMPTION_ANOMALY, f"consumption_anomaly:spike:{w.unit}:{w.flavor}", w.unit,
                    w.flavor, start, end,
                    f"{name} used {times} its usual {w.flavor_key} device-hours: {w.allocated_h:,.0f} in "
                    f"{hours:.0f} h against a norm of {norm:,.0f} for these hours of the week",
                    {**evidence, "signal": "spike"}, None,
                    "A runaway submission script, or an intended experiment? Ask its lead; if intended, dismiss this "
                    "with the reason (it stays quiet for the snooze period); if not, cancel the duplicates.",
                )
            )  # fmt: skip
            continue
        active_norm = w.active_norm_h
        if w.active_h is None or active_norm is None or active_norm <= 0:
            continue
        if w.active_h < DROP_BELOW * active_norm and w.allocated_h >= HELD_AT_LEAST * norm and norm > 0:
            found.append(
                Found(
                    FindingKind.CONSUMPTION_ANOMALY, f"consumption_anomaly:drop:{w.unit}:{w.flavor}", w.unit,
                    w.flavor, start, end,
                    f"{name}'s {w.flavor_key} activity dropped to {w.active_h:,.0f} device-hours (usually "
                    f"{active_norm:,.0f}) while it still holds {w.allocated_h:,.0f}",
                    {**evidence, "signal": "drop", "active_h": round(w.active_h, 1),
                     "active_norm_h": round(active_norm, 1)}, None,
                    "Work that stopped doing anything while holding its devices: a hung job, a stalled input "
                    "pipeline or shared storage? Check its workloads; release what is stuck.",
                )
            )  # fmt: skip
    return found
