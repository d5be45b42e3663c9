"""Allot's records beside Kueue's own numbers, per ClusterQueue, flavor and hour (issue #30.3). Pure.

Kueue exports, per ClusterQueue and flavor, the quota its admitted workloads use
(``kueue_cluster_queue_resource_usage``) and the quota reserved for workloads, admitted or still waiting
for admission checks (``kueue_cluster_queue_resource_reservation``). Allot's hourly rollups say how many
devices the units of that queue held. Two findings come of comparing them:

* **disagreement** — Kueue's usage and Allot's held devices differ by more than the tolerance
  (``max(min_devices, share × the larger)``) in consecutive hours: one side misses workloads (a usage
  source down, Workloads Allot never saw, a queue's namespaces bound elsewhere). "Allot's records and
  Kueue disagree for nlp on a100-80gb, 02:00–04:00";
* **quota held by admission checks** — reservation above usage by more than the tolerance: quota held by
  workloads that Kueue has not admitted yet (a ProvisioningRequest or MultiKueue check still running), so
  others cannot use it while nothing runs on it.

Runs of hours are reported as one finding per queue, flavor and kind (the longest run in the window).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .findings import FindingKind, Found

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class QueueHour:
    cluster_queue: str
    unit: int | None
    unit_path: str
    flavor: int | None
    flavor_key: str
    hour: datetime
    kueue_usage: float
    """Average devices in use by admitted workloads, as Kueue reports."""
    kueue_reservation: float
    allot_held: float
    """Average devices Allot's rollups say the queue's units held."""


@dataclass(frozen=True)
class Tolerance:
    min_devices: float = 1.0
    share: float = 0.10
    min_hours: int = 2

    def beyond(self, a: float, b: float) -> bool:
        return abs(a - b) > max(self.min_devices, self.share * max(a, b))


def _runs(hours: list[QueueHour], test: Iterable[bool]) -> list[list[QueueHour]]:
    runs: list[list[QueueHour]] = []
    for row, hit in zip(hours, test, strict=True):
        if hit and runs and runs[-1] and runs[-1][-1].hour + HOUR == row.hour:
            runs[-1].append(row)
        elif hit:
            runs.append([row])
    return runs


def _span(run: list[QueueHour]) -> str:
    start, end = run[0].hour, run[-1].hour + HOUR
    day = start.strftime("%d %b ")
    return (
        f"{day}{start:%H:%M}–{end:%H:%M}"
        if start.date() == (end - HOUR).date()
        else f"{start:%d %b %H:%M}–{end:%d %b %H:%M}"
    )


def crosscheck(rows: Iterable[QueueHour], tolerance: Tolerance = Tolerance()) -> list[Found]:
    """Findings per queue and flavor: the longest run of hours each condition held (at least
    ``min_hours``)."""
    by_queue: dict[tuple[str, str], list[QueueHour]] = {}
    for row in rows:
        by_queue.setdefault((row.cluster_queue, row.flavor_key), []).append(row)
    found: list[Found] = []
    for (queue, flavor), hours in sorted(by_queue.items()):
        hours.sort(key=lambda r: r.hour)
        disagree = _runs(hours, (tolerance.beyond(h.kueue_usage, h.allot_held) for h in hours))
        held = _runs(hours, (h.kueue_reservation - h.kueue_usage > max(tolerance.min_devices, 0.0) for h in hours))
        for kind, runs in ((FindingKind.KUEUE_DISAGREES, disagree), (FindingKind.QUOTA_HELD_BY_CHECKS, held)):
            longest = max(runs, key=len, default=[])
            if len(longest) < tolerance.min_hours:
                continue
            found.append(_found(kind, queue, flavor, longest))
    return found


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return round(sum(values) / len(values), 1) if values else 0.0


def _found(kind: FindingKind, queue: str, flavor: str, run: list[QueueHour]) -> Found:
    first = run[0]
    who = first.unit_path.rsplit("/", 1)[-1] if first.unit_path else queue
    usage, held, reserved = (
        _mean(getattr(h, f) for h in run) for f in ("kueue_usage", "allot_held", "kueue_reservation")
    )
    evidence: Mapping[str, object] = {
        "cluster_queue": queue,
        "hours": len(run),
        "kueue_usage": usage,
        "kueue_reservation": reserved,
        "allot_held": held,
        "per_hour": [
            {"hour": h.hour.isoformat(), "kueue_usage": h.kueue_usage, "kueue_reservation": h.kueue_reservation,
             "allot_held": h.allot_held}
            for h in run
        ],
    }  # fmt: skip
    flavor_name = flavor.split("/", 1)[-1]
    if kind is FindingKind.KUEUE_DISAGREES:
        summary = (
            f"Allot's records and Kueue disagree for {who} on {flavor_name}, {_span(run)}: Kueue counted {usage} "
            f"devices in use, Allot {held}"
        )
        suggestion = (
            "Check the usage sources of the cluster (Usage sources page): a gap, Workloads Allot did not see, or "
            f"namespaces of ClusterQueue {queue} bound to another unit. Showback for these hours rests on Allot's side."
        )
    else:
        summary = (
            f"{who} on {flavor_name}, {_span(run)}: Kueue held {round(reserved - usage, 1)} devices of quota for "
            "workloads still waiting for admission checks"
        )
        suggestion = (
            f"Quota reserved in ClusterQueue {queue} while its workloads' admission checks ran (provisioning, "
            "MultiKueue): nobody else could use it and nothing ran on it. Look at the checks' latency, or give "
            "them a shorter timeout."
        )
    return Found(
        kind=kind,
        key=f"{kind.value}:{queue}:{flavor}",
        unit=first.unit,
        flavor=first.flavor,
        start=run[0].hour,
        end=run[-1].hour + HOUR,
        summary=summary,
        evidence=evidence,
        cost=None,
        suggestion=suggestion,
    )
