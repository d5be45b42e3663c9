"""Usage rolled up the way a request asks, in SQL: hours and summaries by unit, flavor and period, with
their coverage; the months and hours that have telemetry."""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import reduce
from typing import Any

from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncMonth, TruncWeek

from accounting.models import UsageHour
from quotas.selectors import subtree

GROUPS = {
    "unit": ("unit_path", F("unit__path")),
    "flavor": ("flavor_key", F("flavor__name")),
    "cluster": ("cluster", F("flavor__cluster__name")),
    "day": ("period", TruncDay("hour")),
    "month": ("period", TruncMonth("hour")),
}


MEASURES = ("guarantee", "allocated", "within", "borrowed", "lent", "pending", "active", "productive")


def usage_hours(
    *,
    within: str = "",
    flavor: str = "",
    cluster: str = "",
    start: datetime | None = None,
    end: datetime | None = None,
) -> QuerySet[UsageHour]:
    rows = UsageHour.objects.all()
    if within:
        rows = rows.filter(subtree("unit__path", within))
    if flavor:
        rows = rows.filter(flavor__name=flavor.rsplit("/", 1)[-1])
        if "/" in flavor:
            rows = rows.filter(flavor__cluster__name=flavor.split("/", 1)[0])
    if cluster:
        rows = rows.filter(flavor__cluster__name=cluster)
    if start:
        rows = rows.filter(hour__gte=start)
    if end:
        rows = rows.filter(hour__lt=end)
    return rows


def usage_summary(
    rows: QuerySet[UsageHour], group_by: list[str], *, start: datetime | None = None, end: datetime | None = None
) -> list[dict[str, Any]]:
    """Device-hours per group (one SQL aggregate). Active and productive are null where no source
    measured them, never zero. With a window, each group says how much of it had telemetry: its
    unit-flavor pairs × the window's minutes (clipped to the day or month) is what was expected,
    ``gap_minutes`` what was missing — a gap is never counted as idle."""
    keys = {GROUPS[g][0]: GROUPS[g][1] for g in group_by}
    totals = {f"{m}_h": Sum(m) for m in MEASURES}
    found = (
        rows.annotate(**keys)
        .values(*keys)
        .annotate(
            **totals,
            telemetry_minutes=Sum("minutes"),
            full_minutes=Sum("minutes_full"),
            pairs=Count(F("unit_id") * 1_000_003 + F("flavor_id"), distinct=True),
            productive_estimated_hours=Count("id", filter=Q(productive_estimated=True)),
        )
    )
    period = "day" if "day" in group_by else "month" if "month" in group_by else ""
    out = []
    for row in found.order_by(*keys) if keys else ([found.get()] if rows.exists() else []):
        for measure in MEASURES:
            value = row[f"{measure}_h"]
            row[f"{measure}_h"] = round(value, 3) if value is not None else None
        full = row.pop("full_minutes") or 0
        row["full_share"] = round(full / row["telemetry_minutes"], 4) if row["telemetry_minutes"] else None
        _coverage(row, start, end, period)
        out.append(row)
    if period and out:
        out = _with_gaps(out, list(keys), period, start, end)
    return out


def _coverage(row: dict[str, Any], start: datetime | None, end: datetime | None, period: str) -> None:
    expected = _expected_minutes(row, start, end, period)
    row["expected_minutes"] = expected
    row["gap_minutes"] = max(0, expected - row["telemetry_minutes"]) if expected is not None else None
    row["coverage"] = round(row["telemetry_minutes"] / expected, 4) if expected else None


def _with_gaps(
    rows: list[dict[str, Any]], keys: list[str], period: str, start: datetime | None, end: datetime | None
) -> list[dict[str, Any]]:
    """Grouped by day or month, a period without any telemetry is a row of its own (measures null,
    coverage 0, its gap counted), never a missing line: from ``start`` (or the first period seen) to
    ``end`` (or the last), for every group of the other keys."""
    others = [k for k in keys if k != "period"]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for each in rows:
        groups.setdefault(tuple(each[k] for k in others), []).append(each)
    out = []
    for group, seen in groups.items():
        have = {r["period"]: r for r in seen}
        first = _period_start(start, period) if start else min(have)
        last = max(have) if end is None else end
        moment = first
        while moment < last or (end is None and moment == last):
            row: dict[str, Any] | None = have.get(moment)
            if row is None:
                row = {**dict(zip(others, group, strict=True)), "period": moment, "telemetry_minutes": 0,
                       "pairs": max(r["pairs"] for r in seen), "productive_estimated_hours": 0, "full_share": None,
                       **{f"{m}_h": None for m in MEASURES}}  # fmt: skip
                _coverage(row, start, end, period)
            out.append(row)
            moment = _next(moment, period)
    return sorted(out, key=lambda r: tuple(r[k] for k in keys))


def _expected_minutes(row: dict[str, Any], start: datetime | None, end: datetime | None, period: str) -> int | None:
    """Minutes of telemetry the row should have: its pairs × the window's minutes — clipped to its day
    or month when grouped by one (a whole day or month when no window was given)."""
    if not period and (start is None or end is None):
        return None
    if period:
        first = row["period"]
        following = first + timedelta(days=1) if period == "day" else (first + timedelta(days=32)).replace(day=1)
        lo, hi = max(start or first, first), min(end or following, following)
    else:
        assert start is not None and end is not None
        lo, hi = start, end
    return max(0, int((hi - lo).total_seconds() // 60)) * int(row["pairs"])


PERIODS = {"day": (TruncDay, 31), "week": (TruncWeek, 26), "month": (TruncMonth, 12)}
"""Chart periods: how hours are bucketed, and how many buckets a chart shows."""


def _next(start: datetime, period: str) -> datetime:
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(weeks=1)
    return (start + timedelta(days=32)).replace(day=1)


def unit_usage_days(path: str, *, period: str = "day") -> list[Any]:
    """Per period (day, week or month), over the last periods that have usage for ``path`` and
    everything below: what its units' own workloads held within their guarantees, borrowed, lent and
    queued, and measured as active (device-hours; each unit's rows count only its own workloads, so
    the subtree adds up), and how many hours had telemetry (a period with none is a gap). Active is
    None where no hour of the period was measured. The guarantee is left to the caller. Two queries."""
    from accounting.charts import Day

    trunc, count = PERIODS[period]
    rows = usage_hours(within=path)
    last = rows.aggregate(last=Max("hour"))["last"]
    if last is None:
        return []
    first = rows.filter(hour__lte=last).annotate(p=trunc("hour")).order_by("-p").values_list("p", flat=True)[:1]
    starts = [first[0]]
    for _ in range(count - 1):
        previous = (starts[-1] - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        starts.append(_period_start(previous, period))
    starts.reverse()
    found = {
        r["p"]: r
        for r in rows.filter(hour__gte=starts[0], hour__lt=_next(starts[-1], period))
        .annotate(p=trunc("hour"))
        .values("p")
        .annotate(
            guaranteed=Sum("minutes", filter=Q(guarantee__gt=0)),  # before "minutes" names the sum
            minutes=Sum("minutes"),
            pairs=Count(F("unit_id") * 1_000_003 + F("flavor_id"), distinct=True),
            within=Sum("within"),
            borrowed=Sum("borrowed"),
            lent=Sum("lent"),
            pending=Sum("pending"),
            active=Sum("active"),
            full=Sum("minutes_full"),
        )
    }
    out = []
    for begins in starts:
        row = found.get(begins)
        if not row:
            out.append(Day(begins.date(), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, None))
            continue
        hours = row["minutes"] / 60 / row["pairs"]
        out.append(
            Day(begins.date(), hours, 0.0, row["within"], row["borrowed"], row["lent"], row["pending"], row["active"],
                int(row["full"] or 0), int(row["guaranteed"] or 0))
        )  # fmt: skip
    return out


def _period_start(moment: datetime, period: str) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    return day


def latest_usage() -> list[dict[str, Any]]:
    """Each unit × flavor's latest rolled-up hour (one query): what Prometheus scrapes."""
    last = UsageHour.objects.aggregate(last=Max("hour"))["last"]
    if last is None:
        return []
    return [
        dict(row)
        for row in UsageHour.objects.filter(hour=last, minutes__gt=0).values(
            "unit__path", "flavor__name", "flavor__cluster__name", "minutes", "guarantee", "allocated", "borrowed",
            "lent", "pending", "active", "hour",
        )
    ]  # fmt: skip


def unit_org_labels() -> dict[str, tuple[str, str, str]]:
    """Per active unit path: its department, its cost centre (inherited) and its Kueue unit label — the
    values its Kueue objects carry (quotas.policy.kueue.translate), so Allot's and Kueue's metrics join."""
    from quotas.policy.kueue.target import kueue_name, label_value
    from quotas.selectors import org_snapshot

    snapshot = org_snapshot(include_quotas=False)
    found = {}
    for uid, unit in snapshot.units.items():
        department = snapshot.department(uid)
        found[unit.path] = (
            department.slug if department else "",
            snapshot.effective_cost_centre(uid) or "",
            label_value(unit.kueue_name or kueue_name(unit.path)),
        )
    return found


def telemetry_hours(start: datetime, end: datetime, flavors: Iterable[int] | None = None) -> dict[int, int]:
    """Hours of [start, end) with telemetry (any rollup row) per flavor (of ``flavors`` when given): one
    GROUP BY flavor, hour — cheaper than COUNT(DISTINCT hour). A gap is missing data, never idle."""
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    if flavors is not None:
        rows = rows.filter(flavor_id__in=list(flavors))
    found: dict[int, int] = defaultdict(int)
    for flavor_id, _hour, _n in rows.values_list("flavor_id", "hour").annotate(n=Count("id")):
        found[flavor_id] += 1
    return dict(found)


def usage_months() -> list[str]:
    """Months with usage, newest first (YYYY-MM): what the showback and fairness pages offer."""
    months = UsageHour.objects.annotate(m=TruncMonth("hour")).values_list("m", flat=True).distinct().order_by("-m")
    return [m.strftime("%Y-%m") for m in months]


def held_by_hour(path: str, flavor_id: int, *, days: int = 30) -> tuple[datetime, datetime, list[tuple[float, float]]]:
    """Over the ``days`` up to the latest hour with usage of ``path`` (and below) on one flavor: per
    hour with telemetry, (devices held, devices queued) — device-hours in the hour, the subtree summed
    in SQL (each unit's rows count only its own workloads). ``(end, end, [])`` when it has none."""
    return held_by_hour_many([(path, flavor_id)], days=days)[(path, flavor_id)]


def held_by_hour_many(
    items: Iterable[tuple[str, int]], *, days: int = 30
) -> dict[tuple[str, int], tuple[datetime, datetime, list[tuple[float, float]]]]:
    """:func:`held_by_hour` of several (path, flavor) at once, in two queries whatever their number: the
    latest hour of each (one conditional MAX apiece), then its hours (one conditional SUM apiece, by hour)."""
    wanted = sorted(set(items))
    where = [Q(flavor_id=flavor_id) & subtree("unit__path", path) for path, flavor_id in wanted]
    rows = UsageHour.objects.filter(minutes__gt=0)
    lasts = rows.aggregate(**{f"l{i}": Max("hour", filter=w) for i, w in enumerate(where)}) if where else {}
    now = datetime.now().astimezone()
    out: dict[tuple[str, int], tuple[datetime, datetime, list[tuple[float, float]]]] = {}
    window: dict[int, tuple[datetime, datetime]] = {}
    for i, key in enumerate(wanted):
        last = lasts.get(f"l{i}")
        if last is None:
            out[key] = (now, now, [])
        else:
            window[i] = (last - timedelta(days=days) + timedelta(hours=1), last)
    if window:
        inside = {i: where[i] & Q(hour__gte=start, hour__lte=last) for i, (start, last) in window.items()}
        sums = {
            **{f"h{i}": Sum("allocated", filter=q) for i, q in inside.items()},
            **{f"q{i}": Sum("pending", filter=q) for i, q in inside.items()},
        }
        earliest, latest = min(w[0] for w in window.values()), max(w[1] for w in window.values())
        by_hour = (
            rows.filter(hour__gte=earliest, hour__lte=latest)
            .filter(reduce(operator.or_, inside.values()))
            .values("hour")
            .annotate(**sums)
            .order_by("hour")
        )
        hours: dict[int, list[tuple[float, float]]] = {i: [] for i in window}
        for row in by_hour:
            values: dict[str, Any] = dict(row)
            for i in window:
                if values[f"h{i}"] is not None:  # the item had rows in this hour: an hour with telemetry
                    hours[i].append((float(values[f"h{i}"]), float(values[f"q{i}"] or 0)))
        for i, (start, last) in window.items():
            out[wanted[i]] = (start, last + timedelta(hours=1), hours[i])
    return out
