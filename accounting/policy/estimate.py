"""When a waiting job may start, as a band, with its calibration (issue #44.3). Never a single time.

The band is read from the waits of comparable past jobs — the same unit on the same flavor, else anyone on
the flavor — that waited at least as long as this one already has: from their 10th to their 90th
percentile, less what it has waited. How good such bands are is measured by replaying the recorded
history in submission order: each past job gets the band its predecessors (those started before it was
submitted, within the window) would have given it at submission, and the share that started inside its
band is the calibration, published with every estimate (an 80 % band that holds 80 % of the time is
calibrated). Pure: past jobs in, bands and the calibration out.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

LOW, HIGH = 0.1, 0.9
MIN_BASIS = 10
"""Fewer comparable past jobs than this: no band (said so), rather than a guess."""


@dataclass(frozen=True)
class Band:
    after_s: float
    """It should not start sooner than this many seconds from now…"""
    by_s: float
    """…and should have started by this many seconds from now (LOW and HIGH of the comparable waits)."""
    basis: int
    scope: str
    """``unit``: its unit's jobs on the flavor; ``flavor``: everyone's on the flavor."""


@dataclass(frozen=True)
class PastJob:
    unit: int | None
    flavor: str
    submitted: datetime
    started: datetime

    @property
    def wait_s(self) -> float:
        return max(0.0, (self.started - self.submitted).total_seconds())


@dataclass(frozen=True)
class Calibration:
    jobs: int
    """Jobs that got a band at submission."""
    inside: int
    """Of them, those that started inside it."""
    without_band: int
    """Jobs with too few comparable predecessors to be given one."""

    @property
    def share_inside(self) -> float | None:
        return self.inside / self.jobs if self.jobs else None


def _quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def wait_band(unit_waits: Iterable[float], flavor_waits: Iterable[float], waited_s: float) -> Band | None:
    """The band for a job that has waited ``waited_s``: from its unit's past waits on the flavor when there
    are enough of them, else from the flavor's."""
    for scope, waits in (("unit", unit_waits), ("flavor", flavor_waits)):
        longer = sorted(w for w in waits if w >= waited_s)
        if len(longer) >= MIN_BASIS:
            low, high = _quantile(longer, LOW) - waited_s, _quantile(longer, HIGH) - waited_s
            return Band(max(0.0, low), max(0.0, high), len(longer), scope)
    return None


def calibrate(jobs: Iterable[PastJob], *, window_s: float) -> Calibration:
    """Replay the history in submission order (see the module's docstring). Each key's waits are kept
    sorted as jobs enter (started before the submission) and leave (started more than ``window_s`` before)."""
    by_submit = sorted(jobs, key=lambda j: j.submitted)
    by_start = sorted(by_submit, key=lambda j: j.started)
    waits: dict[tuple[str, int | None] | str, list[float]] = defaultdict(list)
    entered: deque[PastJob] = deque()
    cursor = inside = banded = without = 0
    for job in by_submit:
        while cursor < len(by_start) and by_start[cursor].started <= job.submitted:
            past = by_start[cursor]
            for key in _keys(past):
                insort(waits[key], past.wait_s)
            entered.append(past)
            cursor += 1
        while entered and (job.submitted - entered[0].started).total_seconds() > window_s:
            gone = entered.popleft()
            for key in _keys(gone):
                ordered = waits[key]
                del ordered[bisect_left(ordered, gone.wait_s)]
        band = _band_at_submission(waits[(job.flavor, job.unit)], waits[job.flavor])
        if band is None:
            without += 1
            continue
        banded += 1
        inside += band.after_s <= job.wait_s <= band.by_s
    return Calibration(banded, inside, without)


def _keys(job: PastJob) -> tuple[tuple[str, int | None], str]:
    return (job.flavor, job.unit), job.flavor


def _band_at_submission(unit: list[float], flavor: list[float]) -> Band | None:
    """``wait_band`` at 0 s waited, on lists already sorted (every wait counts)."""
    for scope, ordered in (("unit", unit), ("flavor", flavor)):
        if len(ordered) >= MIN_BASIS:
            return Band(_quantile(ordered, LOW), _quantile(ordered, HIGH), len(ordered), scope)
    return None
