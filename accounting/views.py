"""Portal pages of accounting: where usage comes from and how fresh and complete it is."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.db.models.functions import TruncMonth
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounting.models import SourceRun, SourceStatus, UsageHour
from accounting.selectors import showback_period, showback_report
from quotas.access import may_read_costs


@login_required
def sources(request: HttpRequest) -> HttpResponse:
    """Each usage source (kind, cluster, file): its last run with counts and problems, and the last
    successful watermark — everything before it is ingested. Two queries."""
    latest_ids = (
        SourceRun.objects.values("source", "cluster_id", "name").annotate(last=Max("id")).values_list("last", flat=True)
    )
    latest = list(SourceRun.objects.filter(id__in=list(latest_ids)).select_related("cluster").order_by("source", "-id"))
    good: dict[tuple[str, int | None, str], object] = {
        (source, cluster, name): mark
        for source, cluster, name, mark in SourceRun.objects.exclude(status=SourceStatus.FAILED)
        .values("source", "cluster_id", "name")
        .annotate(mark=Max("watermark"))
        .values_list("source", "cluster_id", "name", "mark")
    }
    rows = [{"run": run, "watermark": good.get((run.source, run.cluster_id, run.name))} for run in latest]
    return render(request, "accounting/sources.html", {"rows": rows})


@login_required
def showback_page(request: HttpRequest) -> HttpResponse:
    """The month's showback, rolled up the tree (the latest month with usage unless one is asked for):
    per unit and flavor, device-hours and cost used, idle, lent, borrowed and shared; per flavor, the
    fleet's parts that the lines add up to."""
    months = [
        m.strftime("%Y-%m")
        for m in UsageHour.objects.annotate(m=TruncMonth("hour")).values_list("m", flat=True).distinct().order_by("-m")
    ]
    month = request.GET.get("month") or (months[0] if months else "")
    within = request.GET.get("within", "")
    context: dict[str, object] = {"months": months, "month": month, "within": within, "report": None, "error": ""}
    if not may_read_costs(request.user, within):
        context["error"] = "Costs are visible to the leads of a unit and the units above it: choose a unit you lead."
    elif month:
        try:
            context["report"] = showback_report(showback_period(month), within=within)
        except ValueError as exc:
            context["error"] = f"{exc}: choose a month from the list."
    return render(request, "accounting/showback.html", context)
