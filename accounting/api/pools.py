"""The pool table in the API: ``GET /api/v1/pools/?month=YYYY-MM&within=<unit path>``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.pools import pool_report
from accounting.selectors.usage import usage_months

LINE_FIELDS: dict[str, Any] = {
    "flavor": serializers.CharField(help_text="cluster/flavor; 'fleet' for the fleet's row"),
    "memory_gb": serializers.IntegerField(help_text="Device memory of the flavor (GB)"),
    "capacity_h": serializers.FloatField(
        help_text="Devices × hours with telemetry (a subtree: its guarantee × those hours)"
    ),
    "allocated_h": serializers.FloatField(),
    "allocated_pct": serializers.FloatField(allow_null=True),
    "active_pct": serializers.FloatField(
        help_text="Active share of the measured allocated hours (DCGM)", allow_null=True
    ),
    "productive_pct": serializers.FloatField(help_text="Of allocated; estimated where flagged", allow_null=True),
    "productive_estimated": serializers.BooleanField(),
    "pending_h": serializers.FloatField(help_text="Queued demand, device-hours"),
    "idle_h": serializers.FloatField(),
    "allocated_pct_change_pp": serializers.FloatField(help_text="Against the month before", allow_null=True),
    "active_pct_change_pp": serializers.FloatField(allow_null=True),
    "productive_pct_change_pp": serializers.FloatField(allow_null=True),
    "before": serializers.DictField(allow_null=True, help_text="The same line for the month before"),
}
POOL_LINE = inline_serializer("PoolLine", fields=LINE_FIELDS)
POOLS = inline_serializer(
    "Pools",
    fields={
        "month": serializers.CharField(),
        "before": serializers.CharField(),
        "within": serializers.CharField(),
        "pools": inline_serializer("PoolLines", many=True, fields=LINE_FIELDS),
        "fleet": inline_serializer("FleetLine", fields=LINE_FIELDS, allow_null=True),
    },
)


@extend_schema(
    parameters=[
        OpenApiParameter("month", OpenApiTypes.STR, description="YYYY-MM (UTC); default the latest with usage"),
        OpenApiParameter("within", OpenApiTypes.STR, description="A unit path: its subtree against its guarantee"),
    ],
    responses={200: POOLS},
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def pools_view(request: Request) -> Response:
    """Per pool (flavor): capacity, allocated %, active share of allocated, productive, pending demand,
    beside the month before (seed 8.12.2, Table 9's shape)."""
    months = usage_months()
    month = request.query_params.get("month") or (months[0] if months else "")
    if not month:
        return Response({"month": ["no usage yet: give month=YYYY-MM once usage is ingested"]}, status=400)
    try:
        return Response(pool_report(month, request.query_params.get("within", "")))
    except ValueError as exc:
        field, _, message = str(exc).partition(": ")
        return Response({field: [message]}, status=400)
