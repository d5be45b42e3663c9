"""The inputs of the allocations part of the rollup, and that part computed in Python where the database has
no ``generate_series`` (SQLite, the embedded demo): ``accounting.services.rollup`` runs ``ALLOCATIONS`` on
PostgreSQL with the same inputs, and a test holds the two to the same rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Max, Q

from accounting.models import SourceKind, SourceRun, SourceStatus, UsageHour


def cadences() -> dict[int, float]:
    """Each unit's checkpoint cadence in seconds, from its effective contract (units without one absent)."""
    from quotas.selectors import org_snapshot

    snapshot = org_snapshot()
    found = {}
    for uid in snapshot.units:
        contract = snapshot.effective_contract(uid)
        if contract and contract.checkpoint_every_s:
            found[uid] = float(contract.checkpoint_every_s)
    return found


def allocation_rows(start: datetime, end: datetime, now: datetime) -> list[UsageHour]:
    """What ``rollup.ALLOCATIONS`` writes, computed in Python for databases without ``generate_series``
    (SQLite, the embedded demo; a month of the demo is a few thousand run-hours): guarantee-hours for
    every hour a successful ingest covered, allocations clipped to each hour, the work evictions lost
    in a run's last hour. PostgreSQL runs the statement; a test holds the two to the same rows."""
    from accounting.models import Allocation
    from quotas.models import Quota

    hour = timedelta(hours=1)

    def floor(at: datetime) -> datetime:
        return at.replace(minute=0, second=0, microsecond=0)

    cadence = cadences()
    rows: dict[tuple[int, int, datetime], dict[str, float]] = {}

    def row(unit: int, flavor: int, at: datetime) -> dict[str, float]:
        return rows.setdefault((unit, flavor, at), {"m": 60.0, "g": 0.0, "a": 0.0, "w": 0.0, "b": 0.0, "lost": 0.0})

    runs = Allocation.objects.filter(unit_id__isnull=False, flavor_id__isnull=False, start__lt=end).filter(
        Q(end__isnull=True) | Q(end__gt=start)
    )
    evicted = ("PREEMPTED", "REQUEUE", "evicted ")
    for a in runs.values("unit_id", "flavor_id", "devices", "equivalents", "borrowed", "start", "end", "raw_state"):
        held, borrowed = float(a["devices"]), float(a["borrowed"])
        if a["equivalents"] is not None:  # slices of a shared flavor: GPU-equivalents, borrowed in proportion
            held, borrowed = a["equivalents"], borrowed * a["equivalents"] / a["devices"]
        stop = a["end"] or now
        last = floor(a["end"] - timedelta(microseconds=1)) if a["end"] else None
        lost = 0.0
        if a["end"] and str(a["raw_state"]).startswith(evicted):
            lost = held * min((a["end"] - a["start"]).total_seconds(), cadence.get(a["unit_id"], 1e18))
        at = floor(max(a["start"], start))
        while at < min(stop, end):
            secs = (min(stop, at + hour) - max(a["start"], at)).total_seconds()
            r = row(a["unit_id"], a["flavor_id"], at)
            r["a"] += held * secs / 3600
            r["w"] += (held - borrowed) * secs / 3600
            r["b"] += borrowed * secs / 3600
            if at == last:
                r["lost"] += lost / 3600
            at += hour
    covered = {c: max(start, min(upto, end)) for c, upto in covered_until().items()}
    quotas = Quota.objects.filter(resource="nvidia.com/gpu", guarantee__gt=0, flavor__cluster_id__in=list(covered))
    for q in quotas.values("unit_id", "flavor_id", "guarantee", "flavor__cluster_id"):
        upto = covered[q["flavor__cluster_id"]]
        at = floor(start)
        while at < upto:
            minutes = min(60, int((upto - at).total_seconds() // 60))
            r = row(q["unit_id"], q["flavor_id"], at)
            r["m"], r["g"] = minutes, q["guarantee"] * minutes / 60
            at += hour
    return [
        UsageHour(
            unit_id=unit,
            flavor_id=flavor,
            hour=at,
            minutes=int(r["m"]),
            guarantee=r["g"],
            allocated=r["a"],
            within=r["w"],
            borrowed=r["b"],
            lent=0,
            pending=0,
            active=None,
            productive=max(0.0, r["a"] - r["lost"]),
            productive_estimated=True,
        )
        for (unit, flavor, at), r in sorted(rows.items())
    ]


def covered_until() -> dict[int, datetime]:
    """Per cluster, up to when its successful Slurm or Kueue ingests have read (the latest watermark)."""
    runs = (
        SourceRun.objects.filter(source__in=[SourceKind.SLURM, SourceKind.KUEUE], watermark__isnull=False)
        .exclude(status=SourceStatus.FAILED)
        .values("cluster_id")
        .annotate(upto=Max("watermark"))
    )
    return {r["cluster_id"]: r["upto"] for r in runs if r["cluster_id"] is not None}
