"""Portal pages of accounting: usage sources (how fresh and complete), showback, and the findings inbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Max
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounting.charts import evidence_chart
from accounting.models import Finding, FindingState, Review, ReviewFile, SourceRun, SourceStatus
from accounting.selectors.fairness import fairness_report
from accounting.selectors.showback import showback_period, showback_report
from accounting.selectors.usage import usage_months
from accounting.selectors.visibility import readable_reviews, visible_findings
from accounting.services.budget_reports import with_budgets
from accounting.services.finding_actions import finding_acknowledge, finding_dismiss, finding_request_change
from accounting.services.review import last_month
from accounting.services.review_accept import review_accept, review_accept_plan
from quotas.access import NotAllowedError, cost_readable_paths, is_platform_admin, led_paths, may_read_costs
from quotas.errors import InputError, form_id
from quotas.policy.violations import PolicyViolationError


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
    months = usage_months()
    month = request.GET.get("month") or (months[0] if months else "")
    readable = cost_readable_paths(request.user)
    within = request.GET.get("within", "")
    if "within" not in request.GET and readable:  # a lead opens on the units they lead, not on an error
        within = min(readable, key=lambda p: (p.count("/"), p))
    choices = sorted(readable) if readable is not None else []
    context: dict[str, object] = {
        "months": months, "month": month, "within": within, "report": None, "error": "", "choices": choices,
    }  # fmt: skip
    if not may_read_costs(request.user, within):
        context["error"] = (
            "Costs are visible to the leads of a unit and the units above it: choose one of the units you lead."
            if choices
            else "Costs are visible to the leads of a unit and the units above it, and you lead none."
        )
    elif month:
        try:
            period = showback_period(month)
            context["report"] = with_budgets(showback_report(period, within=within), period.start, period.end)
        except ValueError as exc:
            context["error"] = f"{exc}: choose a month from the list."
    return render(request, "accounting/showback.html", context)


@login_required
def findings_page(request: HttpRequest) -> HttpResponse:
    """The findings inbox: the units a user leads first, then the rest; open and acknowledged by
    default (``?state=all`` for every one). Each with its evidence, cost at stake and the actions."""
    led = led_paths(request.user)
    state = request.GET.get("state", "live")
    rows = visible_findings(request.user)
    counts = dict(rows.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    if state == "live":
        rows = rows.filter(state__in=[FindingState.OPEN, FindingState.ACKNOWLEDGED])
    elif state in FindingState.values:
        rows = rows.filter(state=state)
    findings = list(rows.order_by(F("cost").desc(nulls_last=True), "-opened_at")[:500])
    for f in findings:
        line = f.evidence.get("guarantee", f.evidence.get("norm_devices"))  # an anomaly's line: the unit's norm
        f.chart = evidence_chart(f.evidence.get("daily") or [], line)  # type: ignore[attr-defined]

    def mine(f: Finding) -> bool:
        path = f.unit.path if f.unit else ""
        return bool(path) and any(path == p or path.startswith(f"{p}/") for p in led)

    return render(
        request,
        "accounting/findings.html",
        {
            "yours": [f for f in findings if mine(f)],
            "others": [f for f in findings if not mine(f)],
            "state_counts": [(s, counts.get(s, 0)) for s in FindingState.values],
            "state": state,
            "led": led,
        },
    )


@login_required
@require_POST
def finding_act(request: HttpRequest, finding_id: int) -> HttpResponse:
    """The buttons of the inbox: acknowledge, dismiss (with a reason), request the suggested change."""
    finding = get_object_or_404(visible_findings(request.user), pk=finding_id)
    what = request.POST.get("do", "")
    reason = request.POST.get("reason", "")
    try:
        if what == "acknowledge":
            finding_acknowledge(actor=request.user, finding=finding, reason=reason)
            messages.success(request, f"Finding #{finding.pk} acknowledged.")
        elif what == "dismiss":
            finding_dismiss(actor=request.user, finding=finding, reason=reason)
            messages.success(request, f"Finding #{finding.pk} dismissed: {reason.strip()}")
        elif what == "request-change":
            change = finding_request_change(actor=request.user, finding=finding, reason=reason)
            messages.success(request, f"Change request #{change.pk} sent for approval, with the evidence.")
            return redirect("quotas:request", request_id=change.pk)
        else:
            messages.error(request, f"unknown action {what!r}: acknowledge, dismiss or request-change")
    except (InputError, NotAllowedError, PolicyViolationError) as exc:
        messages.error(request, f"Finding #{finding.pk}: {exc}")
    return redirect("quotas:findings")


@login_required
def fairness_page(request: HttpRequest) -> HttpResponse:
    """Outcome fairness for a month, the units under ``within`` side by side with their siblings."""
    months = usage_months()
    month = request.GET.get("month") or (months[0] if months else "")
    within = request.GET.get("within", "")
    context: dict[str, object] = {"months": months, "month": month, "within": within, "groups": [], "error": ""}
    if month:
        try:
            report = fairness_report(showback_period(month), within=within)
        except ValueError as exc:
            context["error"] = f"{exc}: choose a month from the list."
        else:
            groups: dict[str, list[dict[str, Any]]] = {}
            for row in report["units"]:
                groups.setdefault(row["parent_path"] or "", []).append(row)
            context["groups"] = sorted(groups.items())
            context["job_records"] = report["job_records"]
    return render(request, "accounting/fairness.html", context)


@login_required
def pools_page(request: HttpRequest) -> HttpResponse:
    """The pool table: per flavor, allocated, active and pending against capacity, beside the month
    before, fleet-wide or for one unit's subtree."""
    from accounting.pools import pool_report

    months = usage_months()
    month = request.GET.get("month") or (months[0] if months else "")
    within = request.GET.get("within", "")
    context: dict[str, object] = {"months": months, "month": month, "within": within, "report": None, "error": ""}
    if month:
        try:
            context["report"] = pool_report(month, within)
        except ValueError as exc:
            context["error"] = f"{exc}."
    return render(request, "accounting/pools.html", context)


@login_required
def reviews_page(request: HttpRequest) -> HttpResponse:
    """Every stored review, newest month first, grouped by organisation or department, with its
    downloads; admins and leads build one for any month (the page follows the build's progress)."""
    from quotas.models import OrgUnit

    reviews = list(readable_reviews(request.user).select_related("unit").order_by("-month", "unit__path"))
    led = led_paths(request.user)
    buildable = [
        u for u in OrgUnit.objects.filter(depth__lte=1, archived_at__isnull=True).order_by("path")
        if is_platform_admin(request.user) or u.path in led
    ]  # fmt: skip
    task = request.GET.get("task", "")
    state: dict[str, Any] = {}
    if task:
        from celery.result import AsyncResult

        result = AsyncResult(task)
        if result.successful():
            return redirect("quotas:review", review_id=result.result)
        state = {
            "status": result.status,
            "detail": str(result.result) if result.failed() else (result.info or {}).get("step", ""),
        }
    if request.method == "POST":
        from accounting.tasks import build_review

        unit = get_object_or_404(OrgUnit, pk=form_id(request.POST.get("unit")), archived_at__isnull=True)
        month = request.POST.get("month", "")
        if unit not in buildable:
            messages.error(request, "Platform admins and the unit's leads build its reviews.")
        else:
            try:
                showback_period(month)
            except ValueError as exc:
                messages.error(request, f"{exc}: give the month as YYYY-MM.")
            else:
                result = build_review.delay(unit.pk, month)
                if result.successful():  # tasks run in-process (the embedded defaults)
                    return redirect("quotas:review", review_id=result.result)
                return redirect(f"{request.path}?task={result.id}")
    return render(
        request,
        "accounting/reviews.html",
        {"reviews": reviews, "buildable": buildable, "task": task, "state": state, "last_month": last_month()},
    )


@login_required
def review_page(request: HttpRequest, review_id: int) -> HttpResponse:
    """One review: summary, downloads with checksums, and its recommendations, each a change request in
    one click (the head approves it through the usual flow)."""
    review = get_object_or_404(Review.objects.select_related("unit"), pk=review_id)
    _may_read_review(request, review.unit.path)
    if request.method == "POST":
        try:
            if request.POST.get("action") == "plan":
                change = review_accept_plan(actor=request.user, review=review, reason=request.POST.get("reason", ""))
            else:
                change = review_accept(actor=request.user, review=review, index=_index(request.POST.get("index")))
        except (InputError, NotAllowedError, PolicyViolationError, ValueError) as exc:
            messages.error(request, f"Could not request it: {exc}")
        else:
            messages.success(request, f"Change request #{change.pk} sent for approval.")
            return redirect("quotas:request", request_id=change.pk)
    files = [(name, digest) for name, digest in sorted(review.files.items())]
    versions = Review.objects.filter(unit=review.unit, month=review.month).order_by("version")
    return render(
        request,
        "accounting/review.html",
        {"review": review, "files": files, "versions": list(versions.values("pk", "version", "generated_at")),
         **_plan_picture(review)},
    )  # fmt: skip


def _plan_picture(review: Review) -> dict[str, Any]:
    """The plan's before/after bars for the review page (a closed month's plan is a record of the month:
    the terms in force at its end), and each recommendation with the fact of its plan item's application
    where it is in force today (when, by whom, which change request): those are not offered again."""
    from accounting.charts import comparison_rows
    from accounting.services.plan import governance_plan
    from accounting.services.plan_records import in_force

    try:
        report = governance_plan(review.unit, review.month)
    except ValueError:
        return {"plan_rows": [], "recs": review.recommendations}
    facts = in_force(report.items())
    recs = [{**r, "applied": facts.get(r["plan_item"]) if r.get("plan_item") is not None else None}
            for r in review.recommendations]  # fmt: skip
    open_items = [n for n, fact in facts.items() if fact is None]
    units = [
        u
        for u in report.as_dict()["backtest"]["units"]
        if u["item"] is not None or u["today"]["queued_h"] or u["plan"]["queued_h"]
    ]
    for u in units:
        u["changed"] = u["item"] is not None
    return {
        "plan_rows": comparison_rows(units, after="plan"), "plan_now": report.totals(), "recs": recs,
        "plan_open": bool(open_items), "plan_applied": sum(1 for fact in facts.values() if fact is not None),
    }  # fmt: skip


@login_required
def review_file(request: HttpRequest, review_id: int, name: str) -> HttpResponse:
    """A review's file as stored, its SHA-256 in the ``Digest`` header."""
    stored = ReviewFile.objects.filter(review_id=review_id, name=name).select_related("review__unit").first()
    if stored is None:
        raise Http404(f"review #{review_id} has no file {name}")
    _may_read_review(request, stored.review.unit.path)  # its files carry every unit's costs
    kind = (
        "application/pdf"
        if name.endswith(".pdf")
        else "text/csv"
        if name.endswith(".csv")
        else ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
    )
    response = HttpResponse(bytes(stored.content), content_type=kind)
    response["Content-Disposition"] = f'attachment; filename="{Path(name).name}"'
    response["Digest"] = f"sha-256={stored.sha256}"
    return response


def _index(raw: object) -> int:
    """A recommendation's position as the form sent it; -1 (none: refused with the count) otherwise."""
    text = str(raw).strip() if raw is not None else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 9 else -1


def _may_read_review(request: HttpRequest, path: str) -> None:
    """A review (its page and every file) shows costs: the showback's read rule (quotas.access)."""
    if not may_read_costs(request.user, path):
        raise PermissionDenied(f"costs of {path} are for the leads of it or a unit above it, and platform admins")
