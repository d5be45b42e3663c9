"""Waiting, explained, in the API (issue #44.5): ``GET /api/v1/waiting/<cluster>/<namespace>/<name>/`` (a
Workload's name, or its job as ``job/<name>``) and ``GET /api/v1/waiting/?unit=<path>`` (a unit's waiting
work, oldest first). The reader's rule: accounting.selectors.visibility.work_rule."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.models import WorkloadRecord
from accounting.selectors.visibility import work_rule
from accounting.services.waiting import Answer, explain_record, find_waiting, unit_waiting
from quotas.models import Cluster, OrgUnit
from quotas.selectors import subtree

CAUSE = inline_serializer(
    "WaitingCause",
    fields={
        "code": serializers.CharField(help_text="reclaim, borrowing-limit, flavor-full, budget, pin, queue, …"),
        "title": serializers.CharField(),
        "evidence": serializers.ListField(child=serializers.CharField()),
    },
)
WAY = inline_serializer(
    "WaitingWayOut",
    fields={
        "kind": serializers.CharField(help_text="smaller, other-flavor, quota-change, wait-reclaim, wait-finish"),
        "text": serializers.CharField(),
        "devices": serializers.IntegerField(allow_null=True),
        "flavor": serializers.CharField(allow_null=True),
        "change": serializers.DictField(allow_null=True, help_text="quota-change: the new guarantee and burst"),
        "by": serializers.DateTimeField(allow_null=True, help_text="wait-reclaim: when the contract promises it"),
        "blocked_by": serializers.CharField(help_text="What the invariants say of it; empty: it can be made"),
    },
)
ANSWER_FIELDS: dict[str, Any] = {
    "cluster": serializers.CharField(),
    "workload": serializers.CharField(help_text="namespace/name"),
    "job": serializers.CharField(help_text="Kind/name of the job it was made for"),
    "unit": serializers.CharField(),
    "owner": serializers.CharField(),
    "state": serializers.CharField(),
    "devices": serializers.IntegerField(),
    "waiting_since": serializers.DateTimeField(allow_null=True),
    "causes": serializers.ListField(child=CAUSE),
    "ways_out": serializers.ListField(child=WAY),
    "scheduler_says": serializers.CharField(help_text="The scheduler's own reason and message"),
    "room": serializers.DictField(help_text="Per flavor: guarantee, ceiling, held, free, room"),
    "observed_at": serializers.DateTimeField(allow_null=True, help_text="When the live view was last refreshed"),
    "age_seconds": serializers.FloatField(allow_null=True),
}
ANSWER = inline_serializer("WaitingAnswer", fields=ANSWER_FIELDS)


def answer_json(answer: Answer) -> dict[str, Any]:
    found, record = answer.explanation, answer.record
    ask = (record.track or {}).get("ask") or {}
    return {
        "cluster": record.cluster.name,
        "workload": record.job_id,
        "job": ask.get("job", ""),
        "unit": found.unit,
        "owner": record.owner,
        "state": record.state,
        "devices": found.devices,
        "waiting_since": record.submitted_at,
        "causes": [{"code": c.code, "title": c.title, "evidence": list(c.evidence)} for c in found.causes],
        "ways_out": [
            {
                "kind": w.kind,
                "text": w.text,
                "devices": w.devices,
                "flavor": w.flavor,
                "change": dict(w.change) if w.change else None,
                "by": w.by,
                "blocked_by": problem,
            }
            for w, problem in answer.ways_out
        ],
        "scheduler_says": found.scheduler_says,
        "room": {k: dict(v) for k, v in found.room.items()},
        "observed_at": found.observed_at,
        "age_seconds": None if answer.age_s is None else round(answer.age_s, 1),
    }


def readable(request: Request, record: WorkloadRecord | None) -> WorkloadRecord:
    rule = work_rule(request.user)
    if record is None or (rule is not None and not WorkloadRecord.objects.filter(rule, pk=record.pk).exists()):
        raise NotFound("no such workload on that cluster that you may read (its owner, its unit's members and leads)")
    return record


@extend_schema(
    operation_id="waiting_workload", responses={200: ANSWER}, summary="Why a workload waits, and what would make it run"
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def waiting_workload(request: Request, cluster: str, namespace: str, name: str) -> Response:
    """A Kubernetes workload by its Workload's name or its job's ``kind/name`` (``job/train``)."""
    found = Cluster.objects.filter(name=cluster).first()
    if found is None:
        raise NotFound(f"cluster {cluster!r}: no such cluster in Allot")
    record = readable(request, find_waiting(found, namespace, name))
    return Response(answer_json(explain_record(record)))


@extend_schema(
    parameters=[OpenApiParameter("unit", OpenApiTypes.STR, description="A unit path: its work and its subtree's")],
    responses={
        200: inline_serializer(
            "WaitingList", fields={"unit": serializers.CharField(), "waiting": serializers.ListField(child=ANSWER)}
        )
    },
    summary="A unit's waiting work, each with its top cause and ways out",
    operation_id="waiting_list",
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def waiting_list(request: Request) -> Response:
    path = request.query_params.get("unit", "")
    unit = OrgUnit.objects.filter(path=path, archived_at__isnull=True).first()
    if unit is None:
        raise ValidationError({"unit": [f"{path!r} is not an active unit's path: give one such as 'acme/research'"]})
    ids = OrgUnit.objects.filter(subtree("path", unit.path), archived_at__isnull=True).values_list("id", flat=True)
    answers = unit_waiting(list(ids))
    rule = work_rule(request.user)
    if rule is not None:
        allowed = set(
            WorkloadRecord.objects.filter(rule, pk__in=[a.record.pk for a in answers]).values_list("pk", flat=True)
        )
        answers = [a for a in answers if a.record.pk in allowed]
    return Response({"unit": unit.path, "waiting": [answer_json(a) for a in answers]})
