"""The reclaim SLO per contract (issue #44.4): for every reclaim (accounting/reclaims.py), the time from the
owner's ask to its admission, against what its contract promises. Per contract, lender and flavor: how many,
p50 / p95, the share within the promise, how many never caused a preemption, and the wait split at the
preemption where there was one (decision: ask → preemption; re-admission: preemption → admission).
Pure: reclaims in, lines and Prometheus histogram buckets out."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accounting.policy.hold_findings import Reclaim

BUCKETS_S = (30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0)
"""The histogram's upper bounds (seconds): around the usual promises (5, 10, 15, 30, 60 min)."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of them at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class SloLine:
    contract: str
    lender: int
    lender_path: str
    flavor_key: str
    promised_s: int
    reclaims: int
    within: int
    never_preempted: int
    p50_s: float
    p95_s: float
    decision_p50_s: float | None
    readmission_p50_s: float | None

    @property
    def share_within(self) -> float:
        return self.within / self.reclaims if self.reclaims else 1.0

    @property
    def kept(self) -> bool:
        return self.within == self.reclaims


def wait_s(r: Reclaim) -> float:
    return (r.admitted - r.submitted).total_seconds()


def reclaim_slo(reclaims: Iterable[Reclaim]) -> list[SloLine]:
    grouped: dict[tuple[str, int, str], list[Reclaim]] = {}
    for r in reclaims:
        grouped.setdefault((r.contract, r.lender, r.flavor_key), []).append(r)
    lines = []
    for (contract, lender, flavor), group in sorted(
        grouped.items(), key=lambda kv: (kv[0][0], kv[1][0].lender_path, kv[0][2])
    ):
        waits = [wait_s(r) for r in group]
        split = [r for r in group if r.preempted is not None]
        decision = [(r.preempted - r.submitted).total_seconds() for r in split if r.preempted]
        readmission = [(r.admitted - r.preempted).total_seconds() for r in split if r.preempted]
        promised = group[0].promised_s
        lines.append(
            SloLine(
                contract or "—", lender, group[0].lender_path, flavor, promised, len(group),
                sum(1 for w in waits if w <= promised), len(group) - len(split),
                percentile(waits, 0.5), percentile(waits, 0.95),
                percentile(decision, 0.5) if decision else None, percentile(readmission, 0.5) if readmission else None,
            )
        )  # fmt: skip
    return lines


def histograms(reclaims: Iterable[Reclaim]) -> dict[str, tuple[list[int], float, int]]:
    """Per contract: cumulative counts at each of BUCKETS_S (then +Inf), the sum of the waits, the count."""
    out: dict[str, tuple[list[int], float, int]] = {}
    for r in reclaims:
        counts, total, n = out.get(r.contract or "—", ([0] * (len(BUCKETS_S) + 1), 0.0, 0))
        w = wait_s(r)
        for i, bound in enumerate(BUCKETS_S):
            if w <= bound:
                counts[i] += 1
        counts[-1] += 1
        out[r.contract or "—"] = (counts, total + w, n + 1)
    return out
