"""Showback, fairness and Slurm fair-share in the API, each under the costs' read rule."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.policy.showback import SharedCost
from accounting.selectors.fairness import fairness_report
from accounting.selectors.showback import FLAVOR_PARTS, showback_period, showback_report
from accounting.services.budget_reports import with_budgets
from accounting.services.fairshare import slurm_fairshare
from quotas.access import may_read_costs
from quotas.errors import InputError
from quotas.models import Cluster


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
                "hours_of": serializers.ChoiceField(
                    ["devices", "GPU-equivalents"],
                    help_text="What its hours count: devices, or GPU-equivalents on a shared flavor (MIG, MPS, "
                    "time-slicing; its price is per GPU-equivalent-hour)",
                ),
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
