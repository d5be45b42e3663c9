"""What-if: a period's real demand replayed through a model of the schedulers' quota semantics, under
today's quotas and under proposed ones. Pure (numpy arrays in, per-unit figures out).

The input is, per flavor, each leaf unit's observed series (one step = a minute where minute samples
exist, else an hour of the rollups): devices **held** by running workloads and devices **queued** by
waiting ones, and a mask of the steps with telemetry (a gap is never idle). The quotas in force while
the series was recorded (``observed``) tell the model *why* work waited:

* **quota-bound** — queued work asked for more than the unit's free guaranteed devices
  (held + queued > guarantee). The free devices it had then (guarantee − held) did not fit the head
  workload: that **fragment** stays unusable to it under any quota (whole-workload granularity where
  the workload's shape is not known: the head needed more than the fragment);
* **did not fit** — queued work that would have fitted the free guaranteed devices by count, yet
  waited (packing, node shapes, FIFO order): no quota change serves it, so the model leaves it queued.

Under any terms (guarantee G, burst B, lendable L) and per step, the scheduler model is Kueue's and
Slurm's common core, guarantee first:

1. **within** = min(held, G) + min(quota-bound queue, G − held − fragment): the guarantee serves what
   the unit held, then its quota-bound queue beyond the fragment;
2. **borrowing**: what it still wants beyond its guarantee (held above a smaller G, and the rest of the
   quota-bound queue) up to its burst, from the flavor's pool — capacity no unit guarantees plus each
   other unit's idle lendable guarantee min(G − within, L), or all of it where the flavor lends idle
   guarantees (Slurm) — shared in proportion to the asks when the
   pool is short (every unit of a flavor is one cohort, as in ``attribution.py``); fluid by default, or
   in **whole jobs** (``job_size``): a unit's share rounded down to a multiple of its job size;
3. **reclaim**: a lender whose within-guarantee demand rises while its devices are lent gets them back
   after the contract's grace + checkpoint/exit + one scheduling pass; the minutes beyond the
   contract's ``reclaim_within`` are **guarantee shortfall** (zero for feasible contracts).

Under the observed quotas a unit that did not borrow is reproduced exactly (held = within); what the
model borrows or fails to borrow is where it can differ from what happened, and
:func:`reproduction_error` says by how much. Measures per unit: allocated, queued, idle guarantee,
lent and borrowed device-hours, minutes at ≥ 90 % of the guarantee (the SC '21 paper's measure),
shortfall minutes and did-not-fit minutes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]

FULL_SHARE = 0.9
"""'At quota': held ≥ 90 % of the guarantee (the SC '21 paper's measure)."""


@dataclass(frozen=True)
class Terms:
    """A unit's quota on the flavor: guarantee, burst (how far above it may borrow), lendable."""

    guarantee: int
    burst: int = 0
    lendable: int = 0


@dataclass(frozen=True)
class Reclaim:
    """A unit's contract as the model needs it (seconds): how long getting lent devices back takes
    (grace + checkpoint/exit + one scheduling pass) and what the contract promises."""

    takes_s: int = 0
    promised_s: int = 0


@dataclass(frozen=True)
class FlavorDemand:
    """One flavor's leaf units over a period: rows of ``held``/``queued``/``present`` are ``units``,
    columns are steps of ``step_minutes``. ``observed`` holds the terms in force while it was
    recorded (what tells quota-bound from did-not-fit)."""

    flavor: str
    units: tuple[int, ...]
    step_minutes: int
    held: Floats
    queued: Floats
    present: Bools
    observed: Mapping[int, Terms]
    pool: int = 0
    """Devices no unit guarantees and no reservation holds (the flavor's unguaranteed capacity)."""
    reclaim: Mapping[int, Reclaim] = field(default_factory=dict)
    lends_idle: bool = False
    """Any idle guaranteed device may be borrowed (a Slurm burst QOS runs on any idle GPU), not only
    the declared lendable part (Kueue's lendingLimit)."""
    job_size: Mapping[int, int] = field(default_factory=dict)
    """Whole jobs: a unit borrows only in multiples of its job size (:func:`job_sizes`); empty, borrowing
    is fluid (any fraction of the pool's share)."""

    @property
    def steps(self) -> int:
        return int(self.held.shape[1]) if self.held.ndim == 2 else 0


@dataclass(frozen=True)
class UnitOutcome:
    unit: int
    flavor: str
    guarantee: int
    allocated_h: float
    queued_h: float
    idle_guarantee_h: float
    lent_h: float
    borrowed_h: float
    full_minutes: float
    """Minutes with telemetry at ≥ 90 % of the guarantee."""
    minutes: float
    """Minutes with telemetry."""
    shortfall_minutes: float
    """Minutes a lender waited for its lent devices beyond the contract's promise."""
    did_not_fit_minutes: float
    """Minutes work waited though its unit held less than its guarantee and nothing was lent."""
    reclaimed: float = 0.0
    """Devices taken back from borrowers for this lender when its own demand returned: per step, what
    its within-guarantee demand needs beyond the guaranteed devices it had not lent, up to what it had
    lent (Σ clip(within_t − (G − lent_t−1), 0, lent_t−1)) — preemptions the terms imply, which the
    cluster's scheduler must be able to do."""

    @property
    def full_share(self) -> float | None:
        return self.full_minutes / self.minutes if self.minutes else None

    def as_dict(self) -> dict[str, object]:
        return {
            "guarantee": self.guarantee,
            "allocated_h": round(self.allocated_h, 1),
            "queued_h": round(self.queued_h, 1),
            "idle_guarantee_h": round(self.idle_guarantee_h, 1),
            "lent_h": round(self.lent_h, 1),
            "borrowed_h": round(self.borrowed_h, 1),
            "full_share": None if self.full_share is None else round(self.full_share, 4),
            "shortfall_minutes": round(self.shortfall_minutes),
            "did_not_fit_minutes": round(self.did_not_fit_minutes),
        }


def _column(values: Sequence[int], n: int) -> Floats:
    return np.asarray(values, dtype=np.float64).reshape(n, 1)


def classify(d: FlavorDemand) -> tuple[Floats, Floats, Bools]:
    """Per unit and step: the quota-bound queue, its fragment, and the did-not-fit steps."""
    n = len(d.units)
    g0 = _column([d.observed.get(u, Terms(0)).guarantee for u in d.units], n)
    waiting = (d.queued > 0) & d.present
    bound = waiting & (d.held + d.queued > g0)
    bound_queue = np.where(bound, d.queued, 0.0)
    fragment = np.where(bound, np.maximum(0.0, g0 - d.held), 0.0)
    return bound_queue, fragment, waiting & ~bound


def simulate(d: FlavorDemand, terms: Mapping[int, Terms]) -> dict[int, UnitOutcome]:
    """The period under ``terms`` (a unit missing from it keeps its observed terms)."""
    n, hours = len(d.units), d.step_minutes / 60.0
    if n == 0 or d.steps == 0:
        return {}
    t = [terms.get(u) or d.observed.get(u) or Terms(0) for u in d.units]
    g = _column([x.guarantee for x in t], n)
    burst = _column([x.burst for x in t], n)
    lendable = _column([x.guarantee if d.lends_idle else min(x.lendable, x.guarantee) for x in t], n)
    present = d.present
    held = np.where(present, d.held, 0.0)
    bound_queue, fragment, did_not_fit = classify(d)
    base = np.minimum(held, g)
    from_queue = np.minimum(bound_queue, np.maximum(0.0, g - held - fragment))
    within = base + from_queue
    ask = np.minimum((held - base) + (bound_queue - from_queue), burst)
    offer = np.where(present, np.minimum(g - within, lendable), 0.0)
    unguaranteed = max(0.0, float(d.pool))
    pool = unguaranteed + offer.sum(axis=0)
    asked = ask.sum(axis=0)
    ratio = np.where(asked > pool, np.divide(pool, asked, out=np.zeros_like(pool), where=asked > 0), 1.0)
    borrowed = ask * ratio
    if d.job_size:  # whole jobs: what does not make a whole job of the unit's size is not borrowed
        size = _column([max(1, d.job_size.get(u, 1)) for u in d.units], n)
        borrowed = np.floor(borrowed / size + 1e-9) * size
    from_lenders = np.maximum(0.0, borrowed.sum(axis=0) - unguaranteed)
    offered = offer.sum(axis=0)
    lent = offer * np.divide(from_lenders, offered, out=np.zeros_like(offered), where=offered > 0)
    served = within + borrowed
    queued = np.where(present, held + d.queued - served, 0.0)
    full = present & (g > 0) & (served >= FULL_SHARE * g - 1e-9)
    shortfall = _shortfall(d, within, lent)
    reclaimed = _reclaimed(g, within, lent)
    lent_any = lent > 1e-9
    out = {}
    minutes = present.sum(axis=1) * d.step_minutes
    for i, unit in enumerate(d.units):
        out[unit] = UnitOutcome(
            unit=unit,
            flavor=d.flavor,
            guarantee=t[i].guarantee,
            allocated_h=float(served[i].sum() * hours),
            queued_h=float(queued[i].sum() * hours),
            idle_guarantee_h=float(np.where(present[i], g[i] - within[i] - lent[i], 0.0).sum() * hours),
            lent_h=float(lent[i].sum() * hours),
            borrowed_h=float(borrowed[i].sum() * hours),
            full_minutes=float(full[i].sum() * d.step_minutes),
            minutes=float(minutes[i]),
            shortfall_minutes=float(shortfall[i]),
            did_not_fit_minutes=float((did_not_fit[i] & (within[i] < g[i]) & ~lent_any[i]).sum() * d.step_minutes),
            reclaimed=float(reclaimed[i]),
        )
    return out


def job_sizes(d: FlavorDemand) -> dict[int, int]:
    """Each unit's job size on the flavor, estimated from its series where no job record says: a job that
    starts raises the devices held by its size, so the median rise between consecutive steps with telemetry
    (at least 1). Jobs starting in the same step rise together, so the estimate errs toward larger jobs —
    toward less borrowing, the conservative side."""
    out = {}
    for i, unit in enumerate(d.units):
        both = d.present[i, 1:] & d.present[i, :-1]
        rises = np.diff(d.held[i])[both]
        rises = rises[rises > 0]
        out[unit] = max(1, round(float(np.median(rises)))) if rises.size else 1
    return out


def _reclaimed(g: Floats, within: Floats, lent: Floats) -> Floats:
    """Per lender: devices taken back from borrowers when its own demand returned (see UnitOutcome)."""
    if within.shape[1] < 2:
        return np.zeros(within.shape[0])
    needed = within[:, 1:] - (g - lent[:, :-1])
    out: Floats = np.clip(needed, 0.0, lent[:, :-1]).sum(axis=1)
    return out


def _shortfall(d: FlavorDemand, within: Floats, lent: Floats) -> Floats:
    """Per unit: minutes beyond its contract's promise spent waiting for lent devices to come back —
    each step in which its within-guarantee demand rose while devices of its guarantee were lent."""
    out = np.zeros(len(d.units))
    if d.steps < 2:
        return out
    rose = (within[:, 1:] > within[:, :-1] + 1e-9) & (lent[:, :-1] > 1e-9)
    for i, unit in enumerate(d.units):
        terms = d.reclaim.get(unit)
        if terms is None:
            continue
        late_s = max(0, terms.takes_s - terms.promised_s)
        if late_s:
            out[i] = float(rose[i].sum()) * late_s / 60.0
    return out


@dataclass(frozen=True)
class Totals:
    allocated_h: float
    queued_h: float
    idle_guarantee_h: float
    shortfall_minutes: float

    def as_dict(self) -> dict[str, float]:
        return {
            "allocated_h": round(self.allocated_h, 1),
            "queued_h": round(self.queued_h, 1),
            "idle_guarantee_h": round(self.idle_guarantee_h, 1),
            "shortfall_minutes": round(self.shortfall_minutes),
        }


def totals(outcomes: Mapping[Any, UnitOutcome]) -> Totals:
    items = list(outcomes.values())
    return Totals(
        sum(o.allocated_h for o in items),
        sum(o.queued_h for o in items),
        sum(o.idle_guarantee_h for o in items),
        sum(o.shortfall_minutes for o in items),
    )


def observed_allocated_h(d: FlavorDemand) -> dict[int, float]:
    """Device-hours the units really held (with telemetry)."""
    held = np.where(d.present, d.held, 0.0).sum(axis=1) * d.step_minutes / 60.0
    return {unit: float(held[i]) for i, unit in enumerate(d.units)}


def reproduction_error(d: FlavorDemand, modelled: Mapping[int, UnitOutcome]) -> float:
    """|modelled − observed| allocated device-hours under the observed terms, as a share of observed
    (summed over the flavor's units before the difference: the fleet figure)."""
    observed = observed_allocated_h(d)
    real = sum(observed.values())
    model = sum(modelled[u].allocated_h for u in observed if u in modelled)
    return abs(model - real) / real if real else 0.0
