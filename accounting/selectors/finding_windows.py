"""The windows the findings detectors read, each in a few aggregate queries (per-hour detail only for the
candidates the aggregates single out): units' usage against their guarantees, reservations, quiet
spans of allocations, workloads stuck waiting."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import F, Max, Q, Sum
from django.db.models.functions import TruncDay

from accounting.models import Allocation, UsageHour, WorkloadRecord
from accounting.policy.findings import Thresholds, UnitWindow, percentile
from accounting.policy.hold_findings import QuietSpan, ReservationWindow, StuckWorkload
from accounting.selectors.showback import unit_flavor_usage
from quotas.models import OrgUnit, ResourceFlavor


def window_hours(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds() // 3600)


def unit_windows(start: datetime, end: datetime, th: Thresholds, prices: dict[int, Decimal | None]) -> list[UnitWindow]:
    """Every unit × flavor with usage in [start, end), totals in one aggregate query; percentiles,
    other units' waiting hours and the daily chart only for the candidates of a detector."""
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    found = unit_flavor_usage(rows)
    totals, units, flavors = found.totals, found.units, found.flavors
    if not totals:
        return []
    expected = window_hours(start, end)
    candidates = []
    for (unit, flavor), r in totals.items():
        own = found.own_guarantee_h(unit, flavor)
        low = own > 0 and r["w"] < th.idle_used_below * own
        busy = r["hours"] and r["above"] >= th.demand_share_above * r["hours"]
        if low or busy:
            candidates.append((unit, flavor, own))
    detail = _candidate_detail(start, end, candidates)
    windows = []
    for unit, flavor, own in candidates:
        r = totals[(unit, flavor)]
        p95_held, p95_demand, waiting = detail["stats"].get((unit, flavor), (0.0, 0.0, 0))
        q = found.quotas.get((unit, flavor))
        f = flavors[flavor]
        windows.append(
            UnitWindow(
                unit=unit, flavor=flavor, path=units[unit].path, flavor_key=f"{f.cluster.name}/{f.name}",
                guarantee=q.guarantee if q else 0, lendable=q.lendable if q else 0,
                children_guarantee=found.children_guarantee(unit, flavor),
                guarantee_h=own, within_h=r["w"] or 0, borrowed_h=r["b"] or 0, lent_h=r["lent_h"] or 0,
                pending_h=r["p"] or 0, hours=r["hours"], expected_hours=expected, hours_demand_above=r["above"],
                p95_held=p95_held, p95_demand=p95_demand, others_waiting_hours=waiting,
                price=prices.get(flavor), daily=detail["daily"].get((unit, flavor), []),
            )
        )  # fmt: skip
    return windows


# Per candidate: the 95th percentiles of devices held and held + queued per hour, and the hours in
# which another unit on the flavor queued or borrowed while the candidate had telemetry. One query
# for every candidate (PostgreSQL's percentile_disc; elsewhere the hourly values are read instead).
CANDIDATES = """
WITH waiting AS (
  SELECT flavor_id, hour, SUM(CASE WHEN pending > 0 OR borrowed > 0 THEN 1 ELSE 0 END) AS n
  FROM accounting_usagehour WHERE hour >= %(start)s AND hour < %(end)s AND flavor_id = ANY(%(flavors)s)
  GROUP BY flavor_id, hour
)
SELECT u.unit_id, u.flavor_id,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY u.allocated * 60.0 / u.minutes),
       percentile_disc(0.95) WITHIN GROUP (ORDER BY (u.allocated + u.pending) * 60.0 / u.minutes),
       SUM(CASE WHEN w.n - CASE WHEN u.pending > 0 OR u.borrowed > 0 THEN 1 ELSE 0 END > 0 THEN 1 ELSE 0 END)
FROM accounting_usagehour u JOIN waiting w ON w.flavor_id = u.flavor_id AND w.hour = u.hour
WHERE u.hour >= %(start)s AND u.hour < %(end)s AND u.minutes > 0
  AND u.unit_id = ANY(%(units)s) AND u.flavor_id = ANY(%(flavors)s)
GROUP BY u.unit_id, u.flavor_id
"""


def _candidate_detail(start: datetime, end: datetime, candidates: list[tuple[int, int, float]]) -> dict[str, Any]:
    """Percentiles and others' waiting hours (``CANDIDATES``) and the daily chart of each candidate:
    two queries whatever their number."""
    from django.db import connection

    pairs = {(u, f) for u, f, _ in candidates}
    stats: dict[tuple[int, int], tuple[float, float, int]] = {}
    daily: dict[tuple[int, int], list[tuple[str, float, float]]] = defaultdict(list)
    if not pairs:
        return {"stats": stats, "daily": daily}
    units, flavors = sorted({u for u, _ in pairs}), sorted({f for _, f in pairs})
    rows = UsageHour.objects.filter(
        hour__gte=start, hour__lt=end, minutes__gt=0, unit_id__in=units, flavor_id__in=flavors
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(CANDIDATES, {"start": start, "end": end, "units": units, "flavors": flavors})
            for unit, flavor, held, demand, waiting in cursor.fetchall():
                if (unit, flavor) in pairs:
                    stats[(unit, flavor)] = (float(held or 0), float(demand or 0), int(waiting or 0))
    else:
        stats = _candidate_stats_portable(start, end, pairs, rows)
    for d in (
        rows.annotate(day=TruncDay("hour")).values("unit_id", "flavor_id", "day")
        .annotate(a=Sum("allocated"), p=Sum("pending"), m=Sum("minutes")).order_by("unit_id", "flavor_id", "day")
    ):  # fmt: skip
        key = (d["unit_id"], d["flavor_id"])
        if key in pairs:
            daily[key].append(
                (d["day"].date().isoformat(), round(d["a"] * 60 / d["m"], 2), round(d["p"] * 60 / d["m"], 2))
            )
    return {"stats": stats, "daily": daily}


def _candidate_stats_portable(
    start: datetime, end: datetime, pairs: set[tuple[int, int]], rows: Any
) -> dict[tuple[int, int], tuple[float, float, int]]:
    """The same as ``CANDIDATES`` on a database without percentile_disc (the embedded SQLite)."""
    flavors = {f for _, f in pairs}
    waiting: dict[tuple[int, datetime], int] = defaultdict(int)
    for flavor, hour in (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, flavor_id__in=flavors)
        .filter(Q(pending__gt=0) | Q(borrowed__gt=0)).values_list("flavor_id", "hour")
    ):  # fmt: skip
        waiting[(flavor, hour)] += 1
    held: dict[tuple[int, int], list[float]] = defaultdict(list)
    demand: dict[tuple[int, int], list[float]] = defaultdict(list)
    others: dict[tuple[int, int], int] = defaultdict(int)
    for unit, flavor, hour, a, p, b, m in rows.values_list(
        "unit_id", "flavor_id", "hour", "allocated", "pending", "borrowed", "minutes"
    ):
        key = (unit, flavor)
        if key not in pairs:
            continue
        held[key].append(a * 60 / m)
        demand[key].append((a + p) * 60 / m)
        if waiting[(flavor, hour)] - (1 if p > 0 or b > 0 else 0) > 0:
            others[key] += 1
    return {key: (percentile(held[key], 0.95), percentile(demand[key], 0.95), others[key]) for key in held}


def reservation_windows(start: datetime, end: datetime, prices: dict[int, Decimal | None]) -> list[ReservationWindow]:
    """Flavors with reservations: the busiest hour's devices held by all units (one aggregate query)."""
    flavors = list(
        ResourceFlavor.objects.select_related("cluster")
        .annotate(reserved=Sum("reservations__devices"))
        .filter(reserved__gt=0)
    )
    out = []
    for f in flavors:
        per_hour = (
            UsageHour.objects.filter(flavor=f, hour__gte=start, hour__lt=end, minutes__gt=0)
            .values("hour").annotate(a=Sum("allocated"), m=Max("minutes"))
        )  # fmt: skip
        held = [r["a"] * 60 / r["m"] for r in per_hour]
        out.append(
            ReservationWindow(
                f.pk, f"{f.cluster.name}/{f.name}", f.reserved, f.physical_devices, f.headroom_devices,  # type: ignore[attr-defined]
                max(held, default=0.0), len(held), window_hours(start, end), prices.get(f.pk),
            )
        )  # fmt: skip
    return out


def quiet_spans(start: datetime, end: datetime, th: Thresholds, prices: dict[int, Decimal | None]) -> list[QuietSpan]:
    """Runs of consecutive hours in which a unit held devices on a flavor with measured activity below
    ``zombie_active_below`` of them (only such hours are read), with the workloads that held devices
    through the whole run."""
    quiet = (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, allocated__gt=0, active__isnull=False)
        .filter(active__lt=F("allocated") * th.zombie_active_below)
        .order_by("unit_id", "flavor_id", "hour")
        .values_list("unit_id", "flavor_id", "hour", "allocated", "active")
    )
    spans: list[list[Any]] = []
    for unit, flavor, hour, held, active in quiet:
        last = spans[-1] if spans else None
        if last and last[0] == unit and last[1] == flavor and last[3] == hour:
            last[3], last[4], last[5] = hour + timedelta(hours=1), last[4] + held, last[5] + active
        else:
            spans.append([unit, flavor, hour, hour + timedelta(hours=1), held, active])
    if not spans:
        return []
    names = dict(OrgUnit.objects.filter(pk__in={s[0] for s in spans}).values_list("id", "path"))
    flavors = {f.pk: f"{f.cluster.name}/{f.name}" for f in ResourceFlavor.objects.select_related("cluster")}
    out = []
    running: dict[tuple[int, int], list[tuple[Any, Any, str]]] = defaultdict(list)
    for unit, flavor, begins, ends, job in (  # every span's candidates in one query
        Allocation.objects.filter(unit_id__in={s[0] for s in spans}, flavor_id__in={s[1] for s in spans})
        .filter(start__lt=end)
        .filter(Q(end__isnull=True) | Q(end__gt=start))
        .order_by("start")
        .values_list("unit_id", "flavor_id", "start", "end", "record__job_id")
    ):
        running[(unit, flavor)].append((begins, ends, job))
    for unit, flavor, begins, ends, held, active in spans:
        holders = [
            job
            for start_at, end_at, job in running[(unit, flavor)]
            if start_at <= begins and (end_at is None or end_at >= ends)
        ][:20]
        out.append(
            QuietSpan(
                unit,
                flavor,
                names[unit],
                flavors[flavor],
                begins,
                ends,
                held,
                active,
                list(holders),
                prices.get(flavor),
            )
        )
    return out


def stuck_workloads(prices: dict[int, Decimal | None]) -> list[StuckWorkload]:
    """Kueue Workloads last seen evicted with their quota still reserved (one query)."""
    rows = WorkloadRecord.objects.filter(
        track__quota_reserved=True, state__in=["evicted", "preempted", "requeued"]
    ).select_related("unit")
    out = []
    for r in rows:
        evictions = [e for e in r.evictions if e.get("at")]
        if not evictions:
            continue
        last = evictions[-1]
        out.append(
            StuckWorkload(
                r.pk, r.unit_id, r.flavor_id, r.job_id, r.unit.path if r.unit else "", r.devices,
                datetime.fromisoformat(last["at"]), last.get("reason", ""), prices.get(r.flavor_id or 0),
            )
        )  # fmt: skip
    return out
