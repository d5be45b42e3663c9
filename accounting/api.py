"""Usage in the API: rolled-up device-hours, workload records, and the sources' runs."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action, api_view
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.models import Finding, Review, SourceRun, WorkloadRecord
from accounting.policy.showback import SharedCost
from accounting.selectors import (
    FLAVOR_PARTS,
    GROUPS,
    MEASURES,
    fairness_report,
    showback_period,
    showback_report,
    usage_hours,
    usage_summary,
    visible_findings,
)
from accounting.services.budget_reports import with_budgets
from accounting.services.fairshare import slurm_fairshare
from accounting.services.findings import finding_acknowledge, finding_dismiss, finding_request_change
from quotas.access import is_platform_admin, led_paths, may_read_costs
from quotas.errors import InputError
from quotas.models import Cluster
from quotas.selectors import subtree


class UsageQuery(serializers.Serializer):
    within = serializers.CharField(required=False, default="", help_text="A unit path: it and everything below.")
    flavor = serializers.CharField(required=False, default="", help_text="A flavor name, or cluster/name.")
    cluster = serializers.CharField(required=False, default="")
    start = serializers.DateTimeField(required=False, allow_null=True, default=None, help_text="From (inclusive).")
    end = serializers.DateTimeField(required=False, allow_null=True, default=None, help_text="To (exclusive).")
    group_by = serializers.CharField(
        required=False,
        default="unit,flavor",
        help_text=f"Comma-separated: {', '.join(GROUPS)} (day and month exclude each other).",
    )

    def validate_group_by(self, value: str) -> list[str]:
        groups = [g.strip() for g in value.split(",") if g.strip()]
        unknown = [g for g in groups if g not in GROUPS]
        if unknown:
            raise serializers.ValidationError(f"unknown grouping {', '.join(unknown)}: use {', '.join(GROUPS)}")
        if {"day", "month"} <= set(groups):
            raise serializers.ValidationError("group by day or by month, not both")
        return groups


USAGE_ROWS = inline_serializer(
    "UsageRow",
    many=True,
    fields={
        "unit_path": serializers.CharField(required=False),
        "flavor_key": serializers.CharField(required=False),
        "cluster": serializers.CharField(required=False),
        "period": serializers.DateTimeField(required=False),
        **{f"{m}_h": serializers.FloatField(allow_null=True) for m in MEASURES},
        "telemetry_minutes": serializers.IntegerField(),
        "pairs": serializers.IntegerField(help_text="Unit-flavor pairs in the group."),
        "expected_minutes": serializers.IntegerField(allow_null=True),
        "gap_minutes": serializers.IntegerField(allow_null=True, help_text="Minutes of the window without telemetry."),
        "coverage": serializers.FloatField(allow_null=True, help_text="Share of the window with telemetry."),
        "full_share": serializers.FloatField(
            allow_null=True,
            help_text="Share of minutes with telemetry held at ≥ 90 % of the guarantee (SC '21's measure).",
        ),
        "productive_estimated_hours": serializers.IntegerField(),
    },
)


@extend_schema(
    parameters=[OpenApiParameter(name, OpenApiTypes.STR) for name in ("within", "flavor", "cluster", "group_by")]
    + [OpenApiParameter(name, OpenApiTypes.DATETIME) for name in ("start", "end")],
    responses={200: USAGE_ROWS},
)
@api_view(["GET"])
def usage(request: Request) -> Response:
    """Device-hours per group: guarantee, allocated (within the guarantee / borrowed), lent, pending
    (queued demand), active and productive (null where not measured), with telemetry coverage."""
    query = UsageQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    params = dict(query.validated_data)
    group_by = params.pop("group_by")
    return Response(usage_summary(usage_hours(**params), group_by, start=params["start"], end=params["end"]))


class WorkloadRecordOut(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    unit_path = serializers.CharField(source="unit.path", allow_null=True, default=None)
    flavor_key = serializers.CharField(source="flavor.key", allow_null=True, default=None)

    class Meta:
        model = WorkloadRecord
        fields = [
            "id", "cluster", "scheduler_id", "unit_path", "account", "owner", "project", "tier", "flavor_key",
            "flavor_name", "devices", "resources", "borrowed", "submitted_at", "admitted_at", "ended_at", "state",
            "exit_code", "evictions", "held_seconds",
        ]  # fmt: skip


class WorkloadRecordFilter(django_filters.FilterSet):
    within = django_filters.CharFilter(method="filter_within", help_text="A unit path: records for it and below.")
    unresolved = django_filters.BooleanFilter(field_name="unit", lookup_expr="isnull", help_text="Mapped to no unit.")
    since = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = WorkloadRecord
        fields = ["state", "owner", "account", "tier"]

    def filter_within(self, queryset: QuerySet[WorkloadRecord], name: str, value: str) -> QuerySet[Any]:
        return queryset.filter(subtree("unit__path", value))


class WorkloadRecordViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Every admitted workload or Slurm job, once, newest first."""

    queryset = WorkloadRecord.objects.select_related("cluster", "unit", "flavor__cluster")
    serializer_class = WorkloadRecordOut
    filterset_class = WorkloadRecordFilter

    def get_queryset(self) -> Any:
        """Who ran what (owners, job names) follows the usage's read rule: under
        ALLOT_SHOWBACK_VISIBILITY=leads, the records of the units one leads and below (admins: all)."""
        from quotas.access import cost_readable_paths, within_any

        rows = super().get_queryset()
        paths = cost_readable_paths(self.request.user)
        return rows if paths is None else rows.filter(within_any("unit__path", paths))


class SourceRunOut(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", allow_null=True, default=None)

    class Meta:
        model = SourceRun
        fields = [
            "id", "source", "cluster", "name", "status", "started_at", "finished_at", "window_start", "window_end",
            "watermark", "counts", "problems", "message",
        ]  # fmt: skip


class SourceRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Each ingest run of each usage source: window, watermark, counts, and the exact problems."""

    queryset = SourceRun.objects.select_related("cluster")
    serializer_class = SourceRunOut
    filterset_fields = ["source", "status"]


class ShowbackQuery(serializers.Serializer):
    month = serializers.CharField(required=False, default="", help_text="YYYY-MM (UTC); the default period.")
    day = serializers.CharField(required=False, default="", help_text="YYYY-MM-DD (UTC), instead of a month.")
    within = serializers.CharField(required=False, default="", help_text="A unit path: it and everything below.")
    rollup = serializers.BooleanField(required=False, default=True, help_text="Each unit with its subtree.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs["month"] and not attrs["day"]:
            raise serializers.ValidationError({"month": "give month=YYYY-MM or day=YYYY-MM-DD"})
        try:
            attrs["period"] = showback_period(attrs["month"], attrs["day"])
        except ValueError as exc:
            name, _, message = str(exc).partition(": ")
            raise serializers.ValidationError({name: f"{message}: use month=YYYY-MM or day=YYYY-MM-DD"}) from exc
        return attrs


PERIOD = inline_serializer(
    "Period",
    fields={
        "label": serializers.CharField(),
        "start": serializers.DateTimeField(),
        "end": serializers.DateTimeField(),
        "hours": serializers.FloatField(),
    },
)
MONEY = serializers.CharField(allow_null=True, help_text="In the flavor's currency, to the cent; null: no price.")
SHOWBACK = inline_serializer(
    "Showback",
    fields={
        "period": PERIOD,
        "within": serializers.CharField(),
        "rule": serializers.ChoiceField(
            choices=[r.value for r in SharedCost], help_text="How shared cost is charged (ALLOT_SHOWBACK_SHARED_COST)."
        ),
        "lines": inline_serializer(
            "ShowbackLine",
            many=True,
            fields={
                "unit_path": serializers.CharField(),
                "depth": serializers.IntegerField(),
                "archived": serializers.BooleanField(),
                "flavor_key": serializers.CharField(),
                **{
                    f"{k}_h": serializers.FloatField()
                    for k in ("guarantee", "used", "idle", "lent", "borrowed", "shared", "charged")
                },
                "cost": MONEY,
                "idle_cost": MONEY,
                "lent_credit": MONEY,
                "budget_h": serializers.FloatField(
                    allow_null=True,
                    help_text="The unit's GPU-hour budget on the flavor for the period holding the "
                    "report's start (with what it carried over); null: none. Its subtree's spend:",
                ),
                "budget_spent_h": serializers.FloatField(allow_null=True, help_text="charged to the report's end"),
                "budget_remaining_h": serializers.FloatField(allow_null=True),
                "budget_forecast": serializers.DateField(
                    allow_null=True, help_text="The day the trailing rate spends it, while its period runs"
                ),
                "budget_ran_out_on": serializers.DateField(allow_null=True),
            },
        ),
        "has_budgets": serializers.BooleanField(help_text="Whether any line has a budget"),
        "flavors": inline_serializer(
            "ShowbackFlavor",
            many=True,
            fields={
                "flavor_key": serializers.CharField(),
                "price_per_device_hour": serializers.CharField(allow_null=True),
                **{f"{k}_h": serializers.FloatField() for k in FLAVOR_PARTS},
                "fleet_cost": MONEY,
                "unshared_cost": MONEY,
            },
        ),
        "problems": serializers.ListField(child=serializers.CharField()),
    },
)


@extend_schema(
    parameters=[OpenApiParameter(name, OpenApiTypes.STR) for name in ("month", "day", "within")]
    + [OpenApiParameter("rollup", OpenApiTypes.BOOL)],
    responses={200: SHOWBACK},
)
@api_view(["GET"])
def showback(request: Request) -> Response:
    """Quota-aware showback for a month or a day: per unit × flavor, device-hours and cost split into
    guarantee used, guarantee idle (the opportunity cost), lent (a credit), borrowed and a share of
    what nobody holds; per flavor, the fleet's parts, which the lines add up to, to the cent."""
    query = ShowbackQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    params = query.validated_data
    if not may_read_costs(request.user, params["within"]):
        raise PermissionDenied(
            "costs are visible to leads of the unit or a unit above it: give within=<a unit you lead>"
        )
    period = params["period"]
    report = showback_report(period, within=params["within"], rollup=params["rollup"])
    return Response(with_budgets(report, period.start, period.end))


class FindingOut(serializers.ModelSerializer):
    unit_path = serializers.CharField(source="unit.path", allow_null=True, default=None)
    flavor_key = serializers.CharField(source="flavor.key", allow_null=True, default=None)
    change_request = serializers.IntegerField(source="change_request_id", allow_null=True, read_only=True)

    class Meta:
        model = Finding
        fields = [
            "id", "kind", "key", "unit_path", "flavor_key", "window_start", "window_end", "summary", "evidence", "cost",
            "suggestion", "action", "partial", "state", "state_reason", "change_request", "detections", "opened_at",
            "updated_at", "closed_at",
        ]  # fmt: skip


class FindingFilter(django_filters.FilterSet):
    within = django_filters.CharFilter(method="filter_within", help_text="A unit path: findings for it and below.")

    class Meta:
        model = Finding
        fields = ["state", "kind"]

    def filter_within(self, queryset: QuerySet[Finding], name: str, value: str) -> QuerySet[Any]:
        return queryset.filter(subtree("unit__path", value))


class FindingAct(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", help_text="Required to dismiss.")


class FindingViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """What the detectors found — idle guarantees, demand above guarantee, idle reservations, zombie
    allocations, stuck Kueue reservations, contracts not honoured — with evidence, cost at stake and a
    suggested action. Leads of the unit (or above) and platform admins act on them."""

    queryset = Finding.objects.select_related("unit", "flavor__cluster")
    serializer_class = FindingOut
    filterset_class = FindingFilter
    permission_classes = [IsAuthenticated]  # actions: the services check the unit's leads (quotas.access)

    def get_queryset(self) -> QuerySet[Finding]:
        return visible_findings(self.request.user)

    def _act(self, request: Request, do: Any) -> Response:
        body = FindingAct(data=request.data)
        body.is_valid(raise_exception=True)
        finding = self.get_object()
        result = do(actor=request.user, finding=finding, reason=body.validated_data["reason"])
        if isinstance(result, Finding):
            return Response(FindingOut(result).data)
        return Response({"change_request": result.pk, "finding": FindingOut(Finding.objects.get(pk=finding.pk)).data})

    @extend_schema(request=FindingAct, responses={200: FindingOut})
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        """Seen: the finding stays live and keeps being updated by the detectors."""
        return self._act(request, finding_acknowledge)

    @extend_schema(request=FindingAct, responses={200: FindingOut})
    @action(detail=True, methods=["post"])
    def dismiss(self, request: Request, pk: str | None = None) -> Response:
        """Not worth acting on: needs a reason; the same condition stays quiet for the snooze period."""
        return self._act(request, finding_dismiss)

    @extend_schema(
        request=FindingAct,
        responses={
            200: inline_serializer(
                "FindingChange", fields={"change_request": serializers.IntegerField(), "finding": FindingOut()}
            )
        },
    )
    @action(detail=True, methods=["post"], url_path="request-change")
    def request_change(self, request: Request, pk: str | None = None) -> Response:
        """Turn the suggested action into a change request (approved through the usual flow)."""
        return self._act(request, finding_request_change)


FAIRNESS = inline_serializer(
    "Fairness",
    fields={
        "period": PERIOD,
        "within": serializers.CharField(),
        "job_records": serializers.BooleanField(
            help_text="False: the period's usage has no per-workload records (a replayed minute series), so "
            "workloads, waits, pending and preemptions are not measured."
        ),
        "units": inline_serializer(
            "FairnessUnit",
            many=True,
            fields={
                "unit_path": serializers.CharField(),
                "parent_path": serializers.CharField(allow_null=True),
                "depth": serializers.IntegerField(),
                "workloads": serializers.IntegerField(help_text="Admitted in the period."),
                "wait_p50_s": serializers.FloatField(allow_null=True),
                "wait_p95_s": serializers.FloatField(allow_null=True),
                "slowdown_p50": serializers.FloatField(allow_null=True, help_text="(wait + run) / run; 1 = no wait."),
                "slowdown_p95": serializers.FloatField(allow_null=True),
                "tiers": serializers.DictField(help_text="Per tier: workloads, wait_p95_s, slowdown_p95."),
                "oldest_pending": serializers.DictField(allow_null=True, help_text="record, job, waiting_s"),
                "preemptions_suffered": serializers.IntegerField(),
                "preemptions_caused": serializers.IntegerField(
                    help_text="Borrowers reclaimed to give it its guarantee."
                ),
                "held_guarantee_when_wanted": serializers.FloatField(
                    allow_null=True,
                    help_text="Of the time its demand reached its guarantee, the share in which it held all of it.",
                ),
                "wanted_guarantee": serializers.DictField(allow_null=True, help_text="count and unit (minutes|hours)"),
                "waited_while_lent_hours": serializers.IntegerField(
                    allow_null=True, help_text="Hours it held less than its guarantee, work waited, devices were lent."
                ),
                "did_not_fit_hours": serializers.IntegerField(
                    allow_null=True,
                    help_text="Hours it held less, work waited, nothing was lent: the work did not fit.",
                ),
            },
        ),
    },
)


@extend_schema(
    parameters=[OpenApiParameter(name, OpenApiTypes.STR) for name in ("month", "day", "within")],
    responses={200: FAIRNESS},
)
@api_view(["GET"])
def fairness(request: Request) -> Response:
    """Outcome fairness per unit and tier for a month or a day: wait p50/p95, slowdown, the oldest
    feasible pending workload, preemptions suffered and caused, guarantee delivered."""
    query = ShowbackQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    params = query.validated_data
    return Response(fairness_report(params["period"], within=params["within"]))


class FairShareQuery(serializers.Serializer):
    cluster = serializers.CharField(help_text="A Slurm cluster, e.g. slurm-lab.")
    since = serializers.DateTimeField(
        required=False, default=None, help_text="Count only jobs started after it (the site's last usage reset)."
    )


FAIRSHARE = inline_serializer(
    "FairShare",
    fields={
        "cluster": serializers.CharField(),
        "at": serializers.DateTimeField(),
        "half_life_s": serializers.IntegerField(),
        "since": serializers.DateTimeField(allow_null=True),
        "jobs": serializers.IntegerField(help_text="Jobs whose usage is counted."),
        "lines": inline_serializer(
            "FairShareLine",
            many=True,
            fields={
                "account": serializers.CharField(),
                "user": serializers.CharField(help_text="Empty on an account's own line."),
                "unit_path": serializers.CharField(),
                "shares": serializers.FloatField(help_text="Fairshare= (RawShares)."),
                "norm_shares": serializers.FloatField(help_text="Shares among siblings (NormShares)."),
                "usage": serializers.FloatField(help_text="Decayed billing-seconds (RawUsage)."),
                "effective_usage": serializers.FloatField(help_text="Usage over the parent's (EffectvUsage)."),
                "level_fs": serializers.FloatField(
                    allow_null=True, help_text="NormShares / EffectvUsage; null: unused."
                ),
                "factor": serializers.FloatField(
                    allow_null=True, help_text="A member's FairShare; on an account, its best-placed member's."
                ),
                "depth": serializers.IntegerField(),
            },
        ),
    },
)


@extend_schema(
    parameters=[
        OpenApiParameter("cluster", OpenApiTypes.STR, required=True),
        OpenApiParameter("since", OpenApiTypes.DATETIME),
    ],
    responses={200: FAIRSHARE},
)
@api_view(["GET"])
def fairshare(request: Request) -> Response:
    """Fair-share on a Slurm cluster as ``sshare -a -l`` shows it, from the usage Allot ingested with
    sacct: per account and member, shares, decayed usage, effective usage, LevelFS and FairShare."""
    query = FairShareQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    cluster = Cluster.objects.filter(name=query.validated_data["cluster"]).first()
    if cluster is None:
        raise InputError("cluster", f"no cluster {query.validated_data['cluster']!r}", "name a Slurm cluster")
    try:
        report = slurm_fairshare(cluster=cluster, since=query.validated_data["since"])
    except ValueError as exc:
        raise InputError("cluster", str(exc), "name a Slurm cluster") from exc
    return Response(
        {
            "cluster": report.cluster,
            "at": report.at,
            "half_life_s": report.half_life_s,
            "since": report.since,
            "jobs": report.jobs,
            "lines": [line.as_dict() for line in report.lines],
        }
    )


class ReviewOut(serializers.ModelSerializer):
    unit_path = serializers.CharField(source="unit.path")
    downloads = serializers.SerializerMethodField()

    class Meta:
        model = Review
        fields = ["id", "unit_path", "month", "generated_at", "summary", "recommendations", "files", "downloads"]

    def get_downloads(self, review: Review) -> list[str]:
        return [f"/reviews/{review.pk}/files/{name}" for name in sorted(review.files)]


class ReviewBuild(serializers.Serializer):
    unit = serializers.CharField(help_text="The path of an organisation or department.")
    month = serializers.RegexField(r"^\d{4}-\d{2}$", help_text="YYYY-MM (UTC).")

    def validate_month(self, value: str) -> str:
        try:
            showback_period(value)
        except ValueError as exc:  # 2020-13, 0000-01, 9999-12
            raise serializers.ValidationError(f"{exc}: give a month such as 2020-05") from exc
        return value


class ReviewAccept(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, help_text="The recommendation's position in the review.")
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class ReviewViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Monthly governance reviews: files with checksums, the summary and one recommendation per
    guarantee. Beat builds last month's on the 1st; ``build`` makes one now (a task whose state
    ``GET /api/v1/reviews/tasks/<id>/`` reports); ``accept`` turns a recommendation into a change request."""

    queryset = Review.objects.select_related("unit")
    serializer_class = ReviewOut
    permission_classes = [IsAuthenticated]
    filterset_fields = ["month"]

    def get_queryset(self) -> Any:
        """Only reviews whose costs the caller may read (showback's rule: ALLOT_SHOWBACK_VISIBILITY)."""
        from accounting.selectors import readable_reviews

        return readable_reviews(self.request.user).select_related("unit")

    @extend_schema(
        request=ReviewBuild,
        responses={
            202: inline_serializer(
                "ReviewTask", fields={"task": serializers.CharField(), "status": serializers.CharField()}
            )
        },
    )
    @action(detail=False, methods=["post"])
    def build(self, request: Request) -> Response:
        """Build (or rebuild) a review; platform admins and the unit's leads."""
        from accounting.tasks import build_review
        from quotas.models import OrgUnit

        body = ReviewBuild(data=request.data)
        body.is_valid(raise_exception=True)
        unit = OrgUnit.objects.filter(path=body.validated_data["unit"], archived_at__isnull=True).first()
        if unit is None:
            raise serializers.ValidationError({"unit": f"no active unit {body.validated_data['unit']!r}"})
        if not (is_platform_admin(request.user) or unit.path in led_paths(request.user)):
            raise PermissionDenied("platform admins and the unit's leads build its reviews")
        result = build_review.delay(unit.pk, body.validated_data["month"])
        return Response({"task": result.id, "status": result.status}, status=202)

    @extend_schema(
        responses={
            200: inline_serializer(
                "ReviewTaskState",
                fields={
                    "status": serializers.CharField(),
                    "review": serializers.IntegerField(allow_null=True),
                    "detail": serializers.CharField(),
                },
            )
        }
    )
    @action(detail=False, methods=["get"], url_path=r"tasks/(?P<task_id>[\w-]+)")
    def task(self, request: Request, task_id: str) -> Response:
        """Where a build stands: PENDING, PROGRESS (with its step), SUCCESS (with the review) or FAILURE."""
        from celery.result import AsyncResult

        result = AsyncResult(task_id)
        info = result.info if isinstance(result.info, dict) else {}
        review = result.result if result.successful() else None
        detail = str(result.result) if result.failed() else str(info.get("step", ""))
        return Response({"status": result.status, "review": review, "detail": detail})

    @extend_schema(
        request=ReviewAccept,
        responses={200: inline_serializer("ReviewAccepted", fields={"change_request": serializers.IntegerField()})},
    )
    @action(detail=True, methods=["post"])
    def accept(self, request: Request, pk: str | None = None) -> Response:
        """Turn one recommendation into a change request (approved through the usual flow)."""
        from accounting.services.review import review_accept

        body = ReviewAccept(data=request.data)
        body.is_valid(raise_exception=True)
        change = review_accept(
            actor=request.user,
            review=self.get_object(),
            index=body.validated_data["index"],
            reason=body.validated_data["reason"],
        )
        return Response({"change_request": change.pk})
