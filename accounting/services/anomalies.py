"""Consumption anomalies from the rollups (accounting.policy.anomalies): each unit and flavor's window
and the same hours of each of the weeks before, in one grouped query; the evidence chart (per day,
over the norm's weeks and the window) only for the ones found."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDay

from accounting.models import UsageHour
from accounting.policy.anomalies import ConsumptionWindow, consumption_anomalies
from accounting.policy.findings import Found, Thresholds
from quotas.models import OrgUnit, ResourceFlavor


def anomalies_found(end: datetime, th: Thresholds) -> list[Found]:
    """The spikes and drops of the window of ``anomaly_window_hours`` ending at ``end``."""
    start = end - timedelta(hours=th.anomaly_window_hours)
    weeks = [(start - timedelta(weeks=k), end - timedelta(weeks=k)) for k in range(1, th.anomaly_weeks + 1)]
    spans = [(start, end), *weeks]
    scope = Q(pk__in=[])
    for a, b in spans:
        scope |= Q(hour__gte=a, hour__lt=b)
    sums: dict[str, Any] = {}
    for k, (a, b) in enumerate(spans):
        inside = Q(hour__gte=a, hour__lt=b)
        sums[f"a{k}"] = Sum("allocated", filter=inside)
        sums[f"n{k}"] = Count("id", filter=inside & Q(minutes__gt=0))
        sums[f"act{k}"] = Sum("active", filter=inside)
        sums[f"m{k}"] = Count("id", filter=inside & Q(active__isnull=False))
    grouped = UsageHour.objects.filter(scope).values("unit_id", "flavor_id").annotate(**sums)
    rows: list[dict[str, Any]] = [dict(r) for r in grouped if r["n0"]]  # type: ignore[misc]  # reported in the window
    if not rows:
        return []
    paths = dict(OrgUnit.objects.filter(pk__in={r["unit_id"] for r in rows}).values_list("id", "path"))
    keys = {
        f.pk: f.key
        for f in ResourceFlavor.objects.select_related("cluster").filter(pk__in={r["flavor_id"] for r in rows})
    }
    windows = [
        ConsumptionWindow(
            r["unit_id"], paths.get(r["unit_id"], ""), r["flavor_id"], keys.get(r["flavor_id"], "?"),
            r["a0"] or 0.0, r["act0"] if r["m0"] else None,
            tuple(r[f"a{k}"] or 0.0 for k in range(1, len(spans)) if r[f"n{k}"]),
            tuple(r[f"act{k}"] or 0.0 for k in range(1, len(spans)) if r[f"m{k}"]),
        )
        for r in rows
    ]  # fmt: skip
    found = consumption_anomalies(windows, th, start, end)
    if not found:
        return []
    flagged = {(f.unit or 0, f.flavor or 0) for f in found}
    daily = _daily(flagged, weeks[-1][0], end)
    return consumption_anomalies([w for w in windows if (w.unit, w.flavor) in flagged], th, start, end, daily)


def _daily(keys: set[tuple[int, int]], start: datetime, end: datetime) -> dict[tuple[int, int], list[list[Any]]]:
    """Per day: average devices held and queued (the findings' evidence chart rows)."""
    rows = (
        UsageHour.objects.filter(
            unit_id__in={u for u, _ in keys}, flavor_id__in={f for _, f in keys}, hour__gte=start, hour__lt=end
        )
        .annotate(day=TruncDay("hour"))
        .values("unit_id", "flavor_id", "day")
        .annotate(a=Sum("allocated"), p=Sum("pending"), n=Count("id"))
        .order_by("day")
    )
    out: dict[tuple[int, int], list[list[Any]]] = defaultdict(list)
    for r in rows:
        if (r["unit_id"], r["flavor_id"]) in keys:
            hours = max(1, r["n"])
            out[(r["unit_id"], r["flavor_id"])].append(
                [r["day"].date().isoformat(), round((r["a"] or 0) / hours, 2), round((r["p"] or 0) / hours, 2)]
            )
    return out
