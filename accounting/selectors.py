"""Reads for accounting: usage rolled up the way a request asks, in SQL."""

from __future__ import annotations

from datetime import datetime, timedelta
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
        expected = _expected_minutes(row, start, end, period)
        row["expected_minutes"] = expected
        row["gap_minutes"] = max(0, expected - row["telemetry_minutes"]) if expected is not None else None
        row["coverage"] = round(row["telemetry_minutes"] / expected, 4) if expected else None
        out.append(row)
    return out


def _expected_minutes(row: dict[str, Any], start: datetime | None, end: datetime | None, period: str) -> int | None:
    if start is None or end is None:
        return None
    lo, hi = start, end
    if period:
        first = row["period"]
        following = first + timedelta(days=1) if period == "day" else (first + timedelta(days=32)).replace(day=1)
        lo, hi = max(lo, first), min(hi, following)
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
            minutes=Sum("minutes"),
            pairs=Count(F("unit_id") * 1_000_003 + F("flavor_id"), distinct=True),
            within=Sum("within"),
            borrowed=Sum("borrowed"),
            lent=Sum("lent"),
            pending=Sum("pending"),
            active=Sum("active"),
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
            Day(begins.date(), hours, 0.0, row["within"], row["borrowed"], row["lent"], row["pending"], row["active"])
        )
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
