"""Usage in the API: rolled-up device-hours, workload records, and the sources' runs."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.models import SourceRun, WorkloadRecord
from accounting.selectors.usage import GROUPS, MEASURES, usage_hours, usage_summary
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
    (queued demand), active and productive (null where not measured), with telemetry coverage. Under
    ALLOT_SHOWBACK_VISIBILITY=leads, only the units the caller leads and below (platform admins: all):
    the figures behind findings and plans follow their rule."""
    from quotas.access import cost_readable_paths, within_any

    query = UsageQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    params = dict(query.validated_data)
    group_by = params.pop("group_by")
    rows = usage_hours(**params)
    paths = cost_readable_paths(request.user)
    if paths is not None:
        rows = rows.filter(within_any("unit__path", paths))
    return Response(usage_summary(rows, group_by, start=params["start"], end=params["end"]))


class WorkloadRecordOut(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    unit_path = serializers.CharField(source="unit.path", allow_null=True, default=None)
    flavor_key = serializers.CharField(source="flavor.key", allow_null=True, default=None)

    class Meta:
        model = WorkloadRecord
        fields = [
            "id", "cluster", "scheduler_id", "unit_path", "account", "owner", "project", "tier", "flavor_key",
            "flavor_name", "devices", "equivalents", "resources", "borrowed", "submitted_at", "admitted_at", "ended_at",
            "state",
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
