"""The reclaim SLO in the API (issue #44.4): ``GET /api/v1/reclaim-slo/?month=YYYY-MM`` (or ``day=``, and
``within=<unit path>``): per contract, lender and flavor the reclaims of the period, p50 / p95 from the ask
to the admission, the share within the promise, how many never caused a preemption. Under the costs' read
rule (the lenders' paths)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.api.showback import PERIOD, ShowbackQuery
from accounting.policy.reclaim_slo import SloLine, reclaim_slo
from accounting.reclaims import reclaims
from quotas.access import cost_readable_paths

LINE = inline_serializer(
    "ReclaimSloLine",
    fields={
        "contract": serializers.CharField(),
        "lender": serializers.CharField(help_text="The unit whose guarantee was lent"),
        "flavor": serializers.CharField(),
        "promised_s": serializers.IntegerField(help_text="The contract's reclaim-within"),
        "reclaims": serializers.IntegerField(),
        "within": serializers.IntegerField(help_text="Admitted within the promise"),
        "share_within": serializers.FloatField(),
        "never_preempted": serializers.IntegerField(help_text="Asks no borrower was preempted for"),
        "p50_s": serializers.FloatField(),
        "p95_s": serializers.FloatField(),
        "decision_p50_s": serializers.FloatField(allow_null=True, help_text="Ask → the borrower's preemption"),
        "readmission_p50_s": serializers.FloatField(allow_null=True, help_text="Preemption → the owner admitted"),
    },
)


SLO = inline_serializer("ReclaimSlo", fields={"period": PERIOD, "lines": serializers.ListField(child=LINE)})


def line_json(line: SloLine) -> dict[str, object]:
    return {
        "contract": line.contract, "lender": line.lender_path, "flavor": line.flavor_key,
        "promised_s": line.promised_s, "reclaims": line.reclaims, "within": line.within,
        "share_within": round(line.share_within, 4), "never_preempted": line.never_preempted,
        "p50_s": line.p50_s, "p95_s": line.p95_s, "decision_p50_s": line.decision_p50_s,
        "readmission_p50_s": line.readmission_p50_s,
    }  # fmt: skip


def _readable(path: str, paths: list[str] | None, within: str) -> bool:
    inside = not within or path == within or path.startswith(f"{within}/")
    return inside and (paths is None or any(path == p or path.startswith(f"{p}/") for p in paths))


@extend_schema(
    operation_id="reclaim_slo",
    parameters=[OpenApiParameter(name, OpenApiTypes.STR) for name in ("month", "day", "within")],
    responses={200: SLO},
    summary="Promises kept: the reclaim SLO per contract and lender",
)
@api_view(["GET"])
def reclaim_slo_view(request: Request) -> Response:
    query = ShowbackQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    period, within = query.validated_data["period"], query.validated_data["within"]
    paths = cost_readable_paths(request.user)
    lines = [
        line_json(line)
        for line in reclaim_slo(reclaims(period.start, period.end, {}))
        if _readable(line.lender_path, paths, within)
    ]
    found = {"label": period.label, "start": period.start, "end": period.end, "hours": period.hours}
    return Response({"period": found, "lines": lines})
