"""Cluster pages: every cluster with its last sync and drift check, its recent runs and (for platform
admins) buttons to sync, dry-run or check drift now; the MultiKueue fleets; one run's per-object
outcomes; and a Slurm cluster's accounts as files a site can load by hand."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from celery import current_app as app  # config/celery.py's app (config/__init__ loads it first)
from celery.schedules import crontab, maybe_schedule
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Prefetch, Subquery, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from quotas import selectors, services
from quotas.access import is_platform_admin
from quotas.errors import InputError
from quotas.models import (
    BeatRun,
    Cluster,
    ClusterKind,
    DriftPolicy,
    Fleet,
    FleetWorker,
    SubtreeCeilings,
    SyncMode,
    SyncOutcome,
    SyncRun,
)
from quotas.policy.slurm.render import qos_script, render_dump

ATTENTION = [
    SyncOutcome.ERROR,
    SyncOutcome.BLOCKED,
    SyncOutcome.INVALID,
    SyncOutcome.CONFLICT,
    SyncOutcome.NOT_OURS,
    SyncOutcome.DRIFT,
]
SHOWN = 500
RECENT = 5
STARTED = {SyncMode.APPLY: "A sync", SyncMode.DRY_RUN: "A dry run", SyncMode.DRIFT_CHECK: "A drift check"}


@login_required
def clusters(request: HttpRequest) -> HttpResponse:
    """Every cluster with its last runs; platform admins change a cluster's connection, drift policy
    and whether it is synced here (audited, with a reason; the same as PATCH /api/v1/clusters/NAME/)."""
    if request.method == "POST":
        if not is_platform_admin(request.user):
            raise PermissionDenied("platform admins change clusters")
        cluster = get_object_or_404(Cluster, name=request.POST.get("cluster", ""))
        fields = {
            "connection_ref": request.POST.get("connection_ref", cluster.connection_ref).strip(),
            "drift_policy": request.POST.get("drift_policy", cluster.drift_policy),
            "enabled": request.POST.get("enabled") == "on",
        }
        if cluster.kind == ClusterKind.SLURM:
            fields["subtree_ceilings"] = request.POST.get("subtree_ceilings", cluster.subtree_ceilings)
            fields["slurm_qos_prefix"] = request.POST.get("slurm_qos_prefix", cluster.slurm_qos_prefix).strip()
        try:
            services.cluster_set(actor=request.user, reason=request.POST.get("reason", ""), name=cluster.name, **fields)
        except InputError as exc:
            messages.error(request, f"{cluster.name}: {exc}")
        else:
            messages.success(request, f"{cluster.name} saved.")
        return redirect("quotas:clusters")
    return render(
        request,
        "quotas/clusters.html",
        {
            "rows": _with_recent(clusters_overview()),
            "fleets": Fleet.objects.select_related("manager").prefetch_related(
                Prefetch("workers", queryset=FleetWorker.objects.select_related("cluster"))
            ),
            "modes": SyncMode.choices,
            "schedule": beat_schedule_overview(),
            "admin": is_platform_admin(request.user),
            "policies": DriftPolicy.choices,
            "ceilings": SubtreeCeilings.choices,
        },
    )


def clusters_overview() -> list[dict[str, Any]]:
    """Every cluster with its flavors' device count, its latest run and its latest drift check: three
    queries whatever the number of clusters."""

    def latest(**where: Any) -> Subquery:
        return Subquery(SyncRun.objects.filter(cluster=OuterRef("pk"), **where).order_by("-pk").values("pk")[:1])

    clusters = list(
        Cluster.objects.annotate(
            devices=Sum("flavors__physical_devices"),
            last_run_id=latest(),
            last_drift_id=latest(mode=SyncMode.DRIFT_CHECK),
        ).order_by("name")
    )
    ids = {c.last_run_id for c in clusters} | {c.last_drift_id for c in clusters}  # type: ignore[attr-defined]
    runs = SyncRun.objects.in_bulk([i for i in ids if i])
    return [
        {
            "cluster": c,
            "devices": c.devices or 0,  # type: ignore[attr-defined]
            "last_run": runs.get(c.last_run_id),  # type: ignore[attr-defined]
            "last_drift": runs.get(c.last_drift_id),  # type: ignore[attr-defined]
        }
        for c in clusters
    ]


def beat_schedule_overview(now: datetime | None = None) -> list[dict[str, Any]]:
    """Every periodic entry of beat (config/celery.py) with its interval, when beat last sent it and
    when it is due next (one query). An entry beat never sent is due "at beat's next start"."""
    now = now or timezone.now()
    runs = {r.name: r for r in BeatRun.objects.all()}
    rows = []
    for name, entry in sorted(app.conf.beat_schedule.items()):
        schedule = maybe_schedule(entry["schedule"])
        last = runs.get(name)
        if isinstance(schedule, crontab):  # a calendar entry (the monthly reviews): no fixed interval
            seconds = None
            every = f"cron {schedule._orig_minute} {schedule._orig_hour} {schedule._orig_day_of_month} * *"
            due = (last.last_run_at if last else now) + schedule.remaining_estimate(last.last_run_at if last else now)
            late = 3600.0
        else:
            seconds = schedule.run_every.total_seconds()
            every = f"{int(seconds // 60)} min"
            due = last.last_run_at + timedelta(seconds=seconds) if last else None
            late = max(60.0, seconds / 2)
        rows.append(
            {
                "name": name,
                "task": entry["task"],
                "args": ", ".join(map(str, entry.get("args", ()))),
                "every_s": None if seconds is None else int(seconds),
                "every": every,
                "last": last,
                "next": due if last or seconds is None else None,
                "overdue": last is not None and due is not None and due < now - timedelta(seconds=late),
            }
        )
    return rows


def _with_recent(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its cluster's last RECENT runs of any mode: the history beside the buttons."""
    from django.db.models import F, Window
    from django.db.models.functions import RowNumber

    ranked = SyncRun.objects.annotate(
        nth=Window(RowNumber(), partition_by=[F("cluster_id")], order_by=[F("started_at").desc(), F("id").desc()])
    ).filter(nth__lte=RECENT)  # one query, whatever the number of clusters
    recent: dict[int, list[SyncRun]] = {}
    for run in ranked.order_by("cluster_id", "nth"):
        recent.setdefault(run.cluster_id, []).append(run)
    for row in rows:
        row["recent"] = recent.get(row["cluster"].pk, [])
    return rows


@login_required
@require_POST
def cluster_start(request: HttpRequest, name: str) -> HttpResponse:
    """A platform admin starts a sync, dry run or drift check of one cluster now (the same as
    POST /api/v1/clusters/NAME/sync/): queued after commit, recorded as theirs with their reason."""
    if not is_platform_admin(request.user):
        raise PermissionDenied("platform admins start cluster runs")
    from quotas.tasks import cluster_sync_start

    cluster = get_object_or_404(Cluster, name=name)
    mode = request.POST.get("mode", "")
    try:
        cluster_sync_start(actor_id=request.user.pk, cluster=cluster, mode=mode, reason=request.POST.get("reason", ""))
    except InputError as exc:  # with the fix: what to do, and that nothing was started
        messages.error(request, f"{cluster.name}: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.errors.items()))
        return redirect("quotas:clusters")
    messages.success(
        request,
        f"{STARTED[SyncMode(mode)]} of {cluster.name} was started: it is listed under its recent runs when done.",
    )
    return redirect("quotas:clusters")


@login_required
def sync_run(request: HttpRequest, run_id: int) -> HttpResponse:
    """One run: what needs attention first (errors, blocked deletes, invalid or foreign objects,
    drift), then what was written or would be; unchanged objects are only counted."""
    run = get_object_or_404(SyncRun.objects.select_related("cluster"), pk=run_id)
    results = run.results.exclude(outcome=SyncOutcome.UNCHANGED)
    attention = list(results.filter(outcome__in=ATTENTION).order_by("outcome", "kind", "name")[:SHOWN])
    rest = list(results.exclude(outcome__in=ATTENTION).order_by("id")[:SHOWN])
    return render(
        request,
        "quotas/sync_run.html",
        {
            "run": run,
            "attention": attention,
            "rest": rest,
            "shown": SHOWN,
            "unchanged": run.results.filter(outcome=SyncOutcome.UNCHANGED).count(),
        },
    )


@login_required
def slurm_file(request: HttpRequest, name: str, what: str) -> HttpResponse:
    """``<cluster>.cfg`` (sacctmgr load) or ``<cluster>-qos.sh`` (run it first), as text."""
    cluster = get_object_or_404(Cluster, name=name, kind=ClusterKind.SLURM)
    try:
        state = selectors.slurm_desired(cluster)
    except ValueError as exc:
        raise Http404(str(exc)) from exc
    if what == "dump":
        text, filename = render_dump(state), f"{state.cluster}.cfg"
    elif what == "qos":
        text, filename = qos_script(state), f"{state.cluster}-qos.sh"
    else:
        raise Http404("ask for dump or qos")
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'inline; filename="{filename}"'
    return response
