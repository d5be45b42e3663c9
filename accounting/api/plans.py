"""The governance plan and what-ifs in the API: ``GET /api/v1/plans/``, ``POST /api/v1/plans/accept/``
and ``POST /api/v1/backtest/``. Declarations and one service call each; a plan, like the review it
leads, is read by those who may read the unit's costs (quotas.access.may_read_costs)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import NotFound, Throttled
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.selectors.showback import showback_period
from accounting.services.backtest_slots import BacktestBusy, backtest_turn
from accounting.services.plan import backtest_what_if, governance_plan, plan_accept
from accounting.services.plan_records import in_force
from quotas.access import may_read_costs
from quotas.models import OrgUnit
from quotas.policy.quantity import Resource
from quotas.policy.snapshot import Quota
from quotas.selectors import flavor_keys, org_snapshot
from quotas.services.quota import QuotaChange, proposed_quota


def _month(value: str) -> str:
    try:
        showback_period(value)
    except ValueError as exc:
        raise serializers.ValidationError(f"{exc}: give a month such as 2020-05") from exc
    return value


class PlanQuery(serializers.Serializer):
    unit = serializers.CharField(help_text="The path of an organisation, department or team: it and below.")
    month = serializers.CharField(help_text="YYYY-MM (UTC): the month whose demand the plan is built from.")

    def validate_month(self, value: str) -> str:
        return _month(value)


class PlanAccept(PlanQuery):
    items = serializers.ListField(
        child=serializers.IntegerField(min_value=0),
        required=False,
        allow_null=True,
        default=None,
        help_text="Item indexes; omit for the whole plan. Items must pass the invariants together.",
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class ChangeIn(serializers.Serializer):
    unit = serializers.CharField(help_text="Unit path.")
    flavor = serializers.CharField(help_text="cluster/flavor, e.g. helios-earth/v100.")
    guarantee = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    burst = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    lendable = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)


class BacktestIn(PlanQuery):
    changes = ChangeIn(many=True, help_text="GPU quotas to try; a value left out stays as it is today.")


def _unit(path: str, user: Any) -> OrgUnit:
    unit = OrgUnit.objects.filter(path=path, archived_at__isnull=True).first()
    if unit is None or not may_read_costs(user, unit.path):  # the same answer: never confirm it exists
        raise NotFound(f"no unit {path!r} whose usage you may read")
    return unit


PLAN = inline_serializer(
    "GovernancePlan",
    fields={
        "unit_path": serializers.CharField(),
        "month": serializers.CharField(),
        "settings": serializers.DictField(),
        "items": serializers.ListField(
            child=serializers.DictField(),
            help_text="Ranked by value per device. A closed month's plan is computed on the terms in force at its "
            "end and never changes; each item says whether it is in_force today and, if so, when, by whom and "
            "under which change request it was applied (applied).",
        ),
        "unmet": serializers.ListField(child=serializers.DictField(), help_text="Demand no parent could give."),
        "dropped": serializers.ListField(child=serializers.CharField()),
        "backtest": serializers.DictField(help_text="totals, reproduce_err_pct, units (today and plan)."),
    },
)


@extend_schema(
    parameters=[OpenApiParameter("unit", OpenApiTypes.STR), OpenApiParameter("month", OpenApiTypes.STR)],
    responses={200: PLAN},
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def plan_view(request: Request) -> Response:
    """The governance plan of the unit's organisation from a month's demand, seen from the unit (its
    items, ranked, keep the organisation plan's numbers), with its backtest: the month replayed under
    its own quotas (and how well that reproduces what happened) and under the plan."""
    query = PlanQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    unit = _unit(query.validated_data["unit"], request.user)
    report = governance_plan(unit, query.validated_data["month"])
    found, facts = report.as_dict(), in_force(report.items())
    for item in found["items"]:
        item["in_force"], item["applied"] = facts[item["index"]] is not None, facts[item["index"]]
    return Response(found)


@extend_schema(
    request=PlanAccept,
    responses={201: inline_serializer("PlanAccepted", fields={"change_request": serializers.IntegerField()})},
)
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def plan_accept_view(request: Request) -> Response:
    """The plan's items inside the unit (or the chosen ones, when they pass together) as one change request."""
    body = PlanAccept(data=request.data)
    body.is_valid(raise_exception=True)
    data = body.validated_data
    unit = _unit(data["unit"], request.user)
    change = plan_accept(actor=request.user, unit=unit, month=data["month"], items=data["items"], reason=data["reason"])
    return Response({"change_request": change.pk}, status=201)


@extend_schema(
    request=BacktestIn,
    responses={
        200: inline_serializer(
            "Backtest",
            fields={
                "unit_path": serializers.CharField(),
                "month": serializers.CharField(),
                "violations": serializers.ListField(child=serializers.DictField()),
                "units": serializers.ListField(child=serializers.DictField(), help_text="today and proposed"),
                "totals": serializers.DictField(),
                "step_minutes": serializers.DictField(),
                "evidence": serializers.BooleanField(help_text="False: the month has no usage for these units."),
            },
        )
    },
)
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def backtest_view(request: Request) -> Response:
    """What the month would have looked like with these quotas, beside the month as it ran, and what
    the changes would break as one change. Reads only."""
    body = BacktestIn(data=request.data)
    body.is_valid(raise_exception=True)
    data = body.validated_data
    unit = _unit(data["unit"], request.user)
    snapshot = org_snapshot()
    ids = {u.path: uid for uid, u in snapshot.units.items()}
    flavor_ids = {key: fid for fid, key in flavor_keys().items()}
    changes: dict[tuple[int, str], Quota] = {}
    errors: dict[str, str] = {}
    for n, change in enumerate(data["changes"]):
        uid = ids.get(change["unit"])
        if uid is None or not (change["unit"] == unit.path or change["unit"].startswith(unit.path + "/")):
            errors[f"changes[{n}].unit"] = f"{change['unit']!r} is not an active unit within {unit.path}"
            continue
        if change["flavor"] not in flavor_ids:
            errors[f"changes[{n}].flavor"] = f"unknown flavor {change['flavor']!r}: use cluster/flavor"
            continue
        asked = QuotaChange(uid, flavor_ids[change["flavor"]], Resource.GPU, change["guarantee"], change["burst"],
                            change["lendable"])  # fmt: skip
        changes[(uid, change["flavor"])] = proposed_quota(asked, snapshot.quota(uid, change["flavor"], Resource.GPU))
    if errors:
        raise serializers.ValidationError(errors)
    try:
        with backtest_turn(request.user.pk):
            return Response(backtest_what_if(unit, data["month"], changes))
    except BacktestBusy as busy:
        raise Throttled(wait=busy.retry_after, detail=str(busy)) from None
