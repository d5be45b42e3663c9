"""Outcome fairness (DESIGN "Fair-share"; seed 8.4.1): not the shares a scheduler was told, but what
each unit got. Pure: per-workload waits and runs in, summaries out.

* **wait** — admitted − submitted (a workload never admitted is not in it: see *oldest pending*);
* **slowdown** — (wait + run) ÷ run, run = the time it held its devices (≥ 1 s, so a job that failed
  at once does not divide by zero); 1 is no waiting at all;
* **oldest feasible pending** — the longest-waiting workload still queued that asks for no more
  devices than its unit's ceiling (one asking for more can never run: that is an admission problem,
  not unfairness);
* **preemptions** suffered (its workloads evicted by preemption) and caused (borrowers preempted to
  give it back its guarantee);
* **held its guarantee when it wanted it** — of the minutes in which a unit's demand (held + queued)
  reached its guarantee, the share in which it held all of it. Not "guarantee delivered": on a real
  month most of the rest is queued work that did not fit the few free devices (packing), not a broken
  promise — the report splits the hours it held less while work waited into those in which devices of
  its guarantee were lent out (a reclaim was due) and those in which nothing was lent (did not fit).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accounting.policy.findings import percentile


@dataclass(frozen=True)
class Outcome:
    """One finished or running workload."""

    unit: int
    tier: str
    wait_s: float
    run_s: float


@dataclass(frozen=True)
class Summary:
    workloads: int
    wait_p50_s: float
    wait_p95_s: float
    slowdown_p50: float
    slowdown_p95: float


def slowdown(wait_s: float, run_s: float) -> float:
    run = max(1.0, run_s)
    return (max(0.0, wait_s) + run) / run


def summarise(outcomes: Sequence[Outcome]) -> Summary:
    waits = [max(0.0, o.wait_s) for o in outcomes]
    slow = [slowdown(o.wait_s, o.run_s) for o in outcomes]
    return Summary(
        len(outcomes),
        percentile(waits, 0.50),
        percentile(waits, 0.95),
        percentile(slow, 0.50),
        percentile(slow, 0.95),
    )


def by_unit_and_tier(outcomes: Iterable[Outcome]) -> dict[tuple[int, str], Summary]:
    """Summaries per unit and tier, and per unit over every tier (tier ``""``)."""
    groups: dict[tuple[int, str], list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault((outcome.unit, outcome.tier), []).append(outcome)
        groups.setdefault((outcome.unit, ""), []).append(outcome)
    return {key: summarise(items) for key, items in groups.items()}


def delivered_share(demand_minutes: int, delivered_minutes: int) -> float | None:
    """Held its guarantee when it wanted it; None when its demand never reached its guarantee."""
    return delivered_minutes / demand_minutes if demand_minutes else None
