"""Portal pages of accounting: where usage comes from and how fresh and complete it is."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounting.models import SourceRun, SourceStatus


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
