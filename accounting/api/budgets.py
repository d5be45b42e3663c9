"""GPU-hour budgets in the API: ``GET|POST /api/v1/budgets/`` and ``DELETE /api/v1/budgets/<id>/``.

A budget is shown with its current period as last evaluated from the rollups (spent, remaining, burn
rate, forecast exhaustion). Writes go through ``quotas.services.budgets.budget_edit`` (a lead sets the
budgets of units inside the ones they lead; above that, ``request: true`` asks with a change request)
and are audited.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.services.budgets import budget_views
from quotas.access import may_set_directly
from quotas.api.serializers.fields import Count, Text
from quotas.errors import MAX_TEXT
from quotas.models import Budget, OrgUnit, ResourceFlavor
from quotas.selectors import BUDGET_FIELDS
from quotas.services.budgets import BudgetChange, budget_delete, budget_edit
from quotas.services.change_requests import change_request_submit

VERSION_REQUIRED: dict[str, Any] = {
    "required": "Send the version you edited: the budget's `version` from GET (0 for a new one), so a change "
    "never overwrites one you did not see.",
    "null": "Send the version you edited (a number, not null): the budget's `version` from GET.",
}


class BudgetIn(serializers.Serializer):
    unit = serializers.CharField(help_text="Unit path, e.g. acme/research/vision.")
    flavor = serializers.CharField(help_text="cluster/flavor, e.g. west/a100.")
    device_hours = Count(required=False, allow_null=True, help_text="Per period; 0 or more.")
    period = serializers.CharField(required=False, allow_null=True, help_text="month or quarter (UTC).")
    action = serializers.CharField(required=False, allow_null=True, help_text="report, no-borrowing, hold or deny.")
    tiers = serializers.ListField(
        child=serializers.CharField(), required=False, allow_null=True, help_text="Tiers it counts and stops."
    )
    warn_percent = Count(required=False, allow_null=True, help_text="1-100, default 80.")
    carry_over_cap = Count(required=False, allow_null=True, help_text="Device-hours; 0: none.")
    oversubscription = serializers.CharField(required=False, allow_null=True, help_text="Children may add up to ×.")
    starts_on = serializers.CharField(required=False, allow_null=True, help_text="YYYY-MM-DD, a period's first day.")
    version = Count(
        min_value=0,
        help_text="The version you edited (the budget's `version` from GET; 0 for one that does not exist yet): "
        "required, so an edit never overwrites one you did not see.",
        error_messages=VERSION_REQUIRED,
    )
    reason = Text(max_length=MAX_TEXT, allow_blank=True, help_text="Why: kept in the audit trail.")
    request = serializers.BooleanField(
        default=False,
        help_text="Ask rather than set: a change request a lead above decides (answers 202 with its id). "
        "Needed for a unit you lead yourself; a budget you may set directly is set at once.",
    )


class DeleteIn(serializers.Serializer):
    reason = Text(max_length=MAX_TEXT, allow_blank=True)
    version = Count(
        min_value=1,
        help_text="The version you saw: a budget changed since is not removed (412).",
        error_messages=VERSION_REQUIRED,
    )


BUDGET = inline_serializer(
    "BudgetStatus",
    fields={
        "id": serializers.IntegerField(),
        "unit_path": serializers.CharField(),
        "flavor_key": serializers.CharField(),
        "period": serializers.CharField(),
        "device_hours": serializers.IntegerField(),
        "action": serializers.CharField(),
        "tiers": serializers.ListField(child=serializers.CharField()),
        "allowance": serializers.FloatField(help_text="Device-hours: the budget and what it carried over."),
        "spent": serializers.FloatField(),
        "remaining": serializers.FloatField(),
        "percent": serializers.FloatField(),
        "burn_rate_per_day": serializers.FloatField(),
        "level": serializers.CharField(help_text="ok, warn or spent"),
        "forecast_exhaustion": serializers.CharField(allow_null=True),
        "held_seconds": serializers.IntegerField(help_text="How long its action was in force this period."),
        "version": serializers.IntegerField(),
    },
)


BUDGET_LIST: serializers.ListSerializer[Any] = serializers.ListSerializer(child=BUDGET)


def _unit(path: str) -> OrgUnit:
    unit = OrgUnit.objects.filter(path=path, archived_at__isnull=True).first()
    if unit is None:
        raise serializers.ValidationError({"unit": [f"no active unit {path!r}: give a unit path such as acme/nlp"]})
    return unit


def _flavor(key: str) -> ResourceFlavor:
    cluster, _, name = key.partition("/")
    flavor = ResourceFlavor.objects.filter(cluster__name=cluster, name=name).first()
    if flavor is None:
        raise serializers.ValidationError({"flavor": [f"no flavor {key!r}: give cluster/flavor, e.g. west/a100"]})
    return flavor


@extend_schema(
    methods=["GET"],
    parameters=[OpenApiParameter("unit", OpenApiTypes.STR, description="A unit path: it and below.")],
    responses={200: BUDGET_LIST},
)
@extend_schema(
    methods=["POST"],
    request=BudgetIn,
    responses={
        201: BUDGET,
        202: inline_serializer("BudgetRequested", fields={"change_request": serializers.IntegerField()}),
    },
)
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def budgets_view(request: Request) -> Response:
    """Budgets with their current period (GET), or set one (POST: fields left out keep their value)."""
    if request.method == "GET":
        path = request.query_params.get("unit")
        return Response([v.as_dict() for v in budget_views(paths=[path] if path else None)])
    body = BudgetIn(data=request.data)
    body.is_valid(raise_exception=True)
    data: dict[str, Any] = body.validated_data
    unit, flavor = _unit(data["unit"]), _flavor(data["flavor"])
    fields = {k: data.get(k) for k in BUDGET_FIELDS}
    change = BudgetChange(unit.pk, flavor.pk, **fields, expected_version=data.get("version"))
    if data["request"] and not may_set_directly(request.user, unit):
        asked = change_request_submit(actor=request.user, reason=data["reason"], changes=[change])
        return Response({"change_request": asked.pk}, status=202)
    (budget,) = budget_edit(actor=request.user, reason=data["reason"], changes=[change])
    (view,) = [v for v in budget_views(unit_ids=[budget.unit_id]) if v.id == budget.pk]
    return Response(view.as_dict(), status=201)


@extend_schema(request=DeleteIn, responses={204: None})
@api_view(["DELETE"])
@permission_classes([IsAuthenticated])
def budget_delete_view(request: Request, pk: int) -> Response:
    """Remove a budget (its history stays in the audit trail)."""
    budget = Budget.objects.select_related("unit").filter(pk=pk).first()
    if budget is None:
        raise NotFound(f"no budget #{pk}")
    body = DeleteIn(data=request.data)
    body.is_valid(raise_exception=True)
    budget_delete(
        actor=request.user,
        reason=body.validated_data["reason"],
        budget=budget,
        expected_version=body.validated_data["version"],
    )
    return Response(status=204)
