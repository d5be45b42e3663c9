"""Waiting, explained, in the portal (issue #44.5): the unit page's *Waiting now* panel (each waiting
workload with its top cause and its first way out) and a page per workload with every cause, its evidence
and the ways out as checked. Both follow the reader's rule (accounting.selectors.visibility.work_rule)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from accounting.models import WorkloadRecord
from accounting.policy.waiting import WayOut
from accounting.selectors.visibility import work_rule
from accounting.services.slurm_waiting import explain_slurm_job, readable_jobs, unit_waiting_slurm
from accounting.services.waiting import Answer, explain_record, find_waiting, unit_waiting
from quotas.access import may_request
from quotas.integrations.slurm import SlurmError
from quotas.models import Cluster, ClusterKind, OrgUnit, ResourceFlavor
from quotas.portal.panels import register_unit_panel
from quotas.selectors import subtree


def _readable(request: HttpRequest, answers: list[Answer]) -> list[Answer]:
    rule = work_rule(request.user)
    if rule is None:
        return answers
    allowed = set(
        WorkloadRecord.objects.filter(rule, pk__in=[a.record.pk for a in answers]).values_list("pk", flat=True)
    )
    return [a for a in answers if a.record.pk in allowed]


def waiting_panel(request: HttpRequest, unit: OrgUnit, base: Mapping[str, Any]) -> dict[str, Any]:
    ids = OrgUnit.objects.filter(subtree("path", unit.path), archived_at__isnull=True).values_list("id", flat=True)
    answers = _readable(request, unit_waiting(list(ids), limit=20))
    jobs = unit_waiting_slurm(list(ids), reader=request.user, limit=20)
    return {"waiting": [{"a": a, "name": a.record.job_id.partition("/")[2]} for a in answers], "waiting_slurm": jobs}


@login_required
def waiting_page(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    found = Cluster.objects.filter(name=cluster).first()
    record = find_waiting(found, namespace, name) if found else None
    rule = work_rule(request.user)
    if record is None or (rule is not None and not WorkloadRecord.objects.filter(rule, pk=record.pk).exists()):
        raise Http404("no such workload that you may read")
    answer = explain_record(record)
    return render(request, "accounting/waiting.html", {"a": answer, "ways": _ways(request, answer)})


@login_required
def slurm_waiting_page(request: HttpRequest, cluster: str, job: str) -> HttpResponse:
    found = Cluster.objects.filter(name=cluster, kind=ClusterKind.SLURM).first()
    try:
        answer = explain_slurm_job(found, job) if found else None
    except SlurmError as exc:
        return render(request, "accounting/waiting_slurm.html", {"problem": f"squeue on {cluster}: {exc}"}, status=503)
    if answer is None or not readable_jobs(request.user, [answer]):
        raise Http404("no such job in the cluster's queue that you may read")
    return render(request, "accounting/waiting_slurm.html", {"a": answer})


def _ways(request: HttpRequest, answer: Answer) -> list[tuple[WayOut, str, str]]:
    """Each way out with why it cannot be taken as it is and, for a quota change the tree accepts and the
    reader may edit or request, the quota form filled in with it (its check and cluster preview shown)."""
    unit = OrgUnit.objects.filter(pk=answer.record.unit_id).first() if answer.record.unit_id else None
    keys = {w.flavor for w, _ in answer.ways_out if w.kind == "quota-change" and w.change}
    on_cluster = ResourceFlavor.objects.filter(cluster_id=answer.record.cluster_id).select_related("cluster")
    flavors = {f.key: f.pk for f in on_cluster if f.key in keys} if keys else {}
    ways = []
    for way, problem in answer.ways_out:
        link = ""
        if way.change and not problem and unit and way.flavor in flavors and may_request(request.user, unit):
            query = {
                f"burst-{flavors[way.flavor]}-gpu": str(way.change["burst"]),
                "reason": f"so that {answer.record.job_id} on {answer.record.cluster.name} can start",
            }
            link = f"{reverse('quotas:unit-edit', args=[unit.pk])}?{urlencode(query)}"
        ways.append((way, problem, link))
    return ways


def promises_panel(request: HttpRequest, unit: OrgUnit, base: Mapping[str, Any]) -> dict[str, Any]:
    """Promises kept: the reclaim SLO of the unit and its subtree as lenders, over the trailing 30 days."""
    from datetime import timedelta

    from django.utils import timezone

    from accounting.policy.reclaim_slo import reclaim_slo
    from accounting.reclaims import reclaims
    from quotas.access import may_read_costs

    if not may_read_costs(request.user, unit.path):
        return {"promises": None}
    now = timezone.now()
    lines = [
        line
        for line in reclaim_slo(reclaims(now - timedelta(days=30), now, {}))
        if line.lender_path == unit.path or line.lender_path.startswith(f"{unit.path}/")
    ]
    return {"promises": lines}


def register() -> None:
    register_unit_panel("accounting.waiting", waiting_panel)
    register_unit_panel("accounting.promises", promises_panel)
