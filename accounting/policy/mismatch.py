"""Policy–infrastructure mismatch (seed 8.12.2, Example 8.2): work pinned to a flavor whose device memory
it does not need while a smaller flavor sits idle, and pools stranded beside a queue their capacity could
serve.

- **Over-specified** (per unit and flavor F): workload-hours on F whose peak device memory (DCGM
  framebuffer used) fits a smaller flavor G of the same cluster — with ``FIT_MARGIN`` to spare — in an
  hour when G had at least that many GPUs idle. Reported when they add up to ``min_device_hours``.
- **Stranded pool** (per pair G < F on one cluster): hours in which G was mostly idle (at least
  ``IDLE_SHARE`` of its GPUs) while work waited for F, in at least ``STRANDED_SHARE`` of the window's
  hours, and a good part of the work measured on F (``FITS_SHARE`` of its device-hours) would fit
  G's memory (the finding says how much). Without memory measurements on F nothing is claimed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from accounting.policy.findings import FindingKind, Found

FIT_MARGIN = 0.9
"""A workload fits a flavor when its peak is at most this share of the flavor's device memory."""
IDLE_SHARE = 0.5
STRANDED_SHARE = 0.25
FITS_SHARE = 0.25
MIB_PER_GB = 1024


@dataclass(frozen=True)
class Pool:
    id: int
    key: str
    cluster: int
    memory_gb: int
    devices: int


@dataclass(frozen=True)
class WorkloadHour:
    unit: int
    unit_path: str
    flavor: int
    workload: str
    hour: datetime
    peak_mib: float
    devices: int


@dataclass(frozen=True)
class PoolHour:
    flavor: int
    hour: datetime
    allocated: float
    pending: float


def fits(peak_mib: float, pool: Pool) -> bool:
    return peak_mib <= FIT_MARGIN * pool.memory_gb * MIB_PER_GB


def smaller(pool: Pool, pools: Iterable[Pool]) -> list[Pool]:
    """The same cluster's pools with less device memory, the largest first (the nearest step down)."""
    return sorted(
        (p for p in pools if p.cluster == pool.cluster and 0 < p.memory_gb < pool.memory_gb),
        key=lambda p: (-p.memory_gb, p.key),
    )


def _remedy(unit_name: str, big: Pool, small: Pool) -> str:
    return (
        f"On Kueue, list {small.key} before {big.key} in {unit_name}'s ClusterQueue (flavor order, with "
        f"flavorFungibility whenCanBorrow: TryNextFlavor) so the smaller pool is tried first, or give {unit_name} a "
        f"guarantee on {small.key}; on Slurm, have job_submit suggest --gres=gpu:{small.key.split('/')[-1]} for jobs "
        f"that fit, or grant the account's QOS the other GPU type. Template requests from measured memory, not habit."
    )


def over_specified(
    hours: Iterable[WorkloadHour],
    pools: Mapping[int, Pool],
    idle: Mapping[tuple[int, datetime], float],
    start: datetime,
    end: datetime,
    min_device_hours: float = 24.0,
) -> list[Found]:
    """One finding per unit and flavor whose over-specified workload-hours add up (module docstring)."""
    grouped: dict[tuple[int, int], list[tuple[WorkloadHour, Pool]]] = defaultdict(list)
    paths: dict[int, str] = {}
    for wh in hours:
        big = pools.get(wh.flavor)
        if big is None:
            continue
        for small in reversed(smaller(big, pools.values())):  # the smallest that fits and had room
            if fits(wh.peak_mib, small) and idle.get((small.id, wh.hour), 0.0) >= wh.devices:
                grouped[(wh.unit, wh.flavor)].append((wh, small))
                paths[wh.unit] = wh.unit_path
                break
    found = []
    for (unit, flavor), rows in sorted(grouped.items()):
        device_hours = sum(wh.devices for wh, _ in rows)
        if device_hours < min_device_hours:
            continue
        big = pools[flavor]
        target = max({s for _, s in rows}, key=lambda s: sum(wh.devices for wh, t in rows if t == s))
        peaks = sorted(wh.peak_mib for wh, _ in rows)
        p95 = peaks[min(len(peaks) - 1, math.ceil(0.95 * len(peaks)) - 1)] / MIB_PER_GB
        workloads = sorted({wh.workload for wh, _ in rows})
        name = paths[unit].rsplit("/", 1)[-1]
        idle_h = sum(idle.get((target.id, wh.hour), 0.0) for wh, s in rows if s == target)
        concurrent: dict[datetime, int] = defaultdict(int)
        for wh, s in rows:
            if s == target:
                concurrent[wh.hour] += wh.devices
        busy = sorted(concurrent.values())
        p95_devices = busy[min(len(busy) - 1, math.ceil(0.95 * len(busy)) - 1)]
        found.append(
            Found(
                FindingKind.OVER_SPECIFIED, f"over_specified:{unit}:{flavor}", unit, flavor, start, end,
                f"{name}: {len(workloads)} workload{'s' if len(workloads) != 1 else ''} "
                f"({device_hours:,} device-hours) "
                f"on {big.key} ({big.memory_gb} GB) peaked at {p95:.0f} GB or less while {target.key} "
                f"({target.memory_gb} GB) had idle GPUs at the time",
                {
                    "workloads": len(workloads), "device_hours": device_hours, "peak_p95_gb": round(p95, 1),
                    "flavor_memory_gb": big.memory_gb, "fits": target.key, "fits_memory_gb": target.memory_gb,
                    "idle_device_hours_beside": round(idle_h, 1), "examples": workloads[:5],
                    "fits_flavor_id": target.id, "concurrent_p95_devices": p95_devices,
                },
                None, _remedy(name, big, target),
            )
        )  # fmt: skip
    return found


def stranded_pools(
    pool_hours: Iterable[PoolHour],
    pools: Mapping[int, Pool],
    measured: Iterable[WorkloadHour],
    hours_in_window: int,
    start: datetime,
    end: datetime,
) -> list[Found]:
    """Pools mostly idle beside a queue for a larger one whose measured work would fit them."""
    by_hour: dict[int, dict[datetime, PoolHour]] = defaultdict(dict)
    for ph in pool_hours:
        by_hour[ph.flavor][ph.hour] = ph
    on_flavor: dict[int, list[WorkloadHour]] = defaultdict(list)
    for wh in measured:
        on_flavor[wh.flavor].append(wh)
    found = []
    for big in sorted(pools.values(), key=lambda p: p.key):
        work = on_flavor.get(big.id, [])
        for small in smaller(big, pools.values()):
            if not work or not small.devices:
                continue
            fitting = sum(wh.devices for wh in work if fits(wh.peak_mib, small))
            share = fitting / sum(wh.devices for wh in work)
            stranded = [
                (hour, ph)
                for hour, ph in by_hour[big.id].items()
                if ph.pending > 0
                and small.devices - by_hour[small.id].get(hour, PoolHour(small.id, hour, 0.0, 0.0)).allocated
                >= IDLE_SHARE * small.devices
            ]
            if share < FITS_SHARE or len(stranded) < STRANDED_SHARE * max(1, hours_in_window):
                continue
            waited = sum(ph.pending for _, ph in stranded)
            idle_h = sum(
                small.devices - by_hour[small.id].get(h, PoolHour(small.id, h, 0.0, 0.0)).allocated for h, _ in stranded
            )
            found.append(
                Found(
                    FindingKind.STRANDED_POOL, f"stranded_pool:{small.id}:{big.id}", None, small.id, start, end,
                    f"{small.key} ({small.devices} GPUs, {small.memory_gb} GB) sat mostly idle in {len(stranded)} of "
                    f"{hours_in_window} hours while {waited:,.0f} device-hours waited for {big.key}; {share:.0%} of "
                    f"the work measured on {big.key} fits in {small.memory_gb} GB",
                    {
                        "idle_flavor": small.key, "busy_flavor": big.key, "hours": len(stranded),
                        "hours_in_window": hours_in_window, "waited_h": round(waited, 1),
                        "idle_device_hours": round(idle_h, 1), "fits_share": round(share, 3),
                        "devices_at_stake": small.devices,
                    },
                    None,
                    f"Let work that fits run on {small.key}: capability-based matching (request memory, not a model), "
                    f"the smaller flavor first in Kueue's flavor order, or Slurm jobs submitted without a GPU type "
                    f"where the model does not matter. A policy written for one pool no longer matches the fleet.",
                )
            )  # fmt: skip
    return found
