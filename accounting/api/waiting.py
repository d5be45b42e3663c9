"""Waiting, explained, in the API (issue #44.5): ``GET /api/v1/waiting/<cluster>/<namespace>/<name>/`` (a
Workload's name, or its job as ``job/<name>``) and ``GET /api/v1/waiting/?unit=<path>`` (a unit's waiting
work, oldest first). The reader's rule: accounting.selectors.visibility.work_rule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NoReturn

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.models import WorkloadRecord
from accounting.policy.estimate import HIGH, LOW, MIN_BASIS, Band, Calibration
from accounting.policy.waiting import Explanation, WayOut
from accounting.selectors.visibility import may_read_job, work_rule
from accounting.services.slurm_waiting import SlurmAnswer, explain_slurm_job, unit_waiting_slurm
from accounting.services.waiting import (
    HISTORY_DAYS,
    Answer,
    explain_record,
    find_waiting,
    observed_at,
    unit_waiting,
)
from quotas.integrations.slurm import SlurmError
from quotas.models import Cluster, ClusterKind, OrgUnit
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
        "kind": serializers.CharField(
            help_text="smaller, other-flavor, quota-change, budget, wait-reclaim, wait-finish; "
            "Slurm: other-qos, wait-queue, ask"
        ),
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
    "queue_says": serializers.CharField(
        help_text="The scheduler's own figures for its queue, with their age: Kueue's ClusterQueue (GPUs used and "
        "borrowed per flavor, Workloads pending and admitted), or slurmctld's QOS of its account (GPUs held of each "
        "limit); empty when they could not be read"
    ),
    "room": serializers.DictField(help_text="Per flavor: guarantee, ceiling, held, free, room"),
    "observed_at": serializers.DateTimeField(allow_null=True, help_text="When the live view was last refreshed"),
    "age_seconds": serializers.FloatField(allow_null=True),
    "estimate": serializers.DictField(
        allow_null=True, help_text="start_after and start_by (a band, never one time), basis, scope (unit or flavor)"
    ),
    "estimate_note": serializers.CharField(),
    "calibration": serializers.DictField(
        allow_null=True, help_text="Of the last 30 days' jobs given a band at submission, the share that started in it"
    ),
}
ANSWER = inline_serializer("WaitingAnswer", fields=ANSWER_FIELDS)


def _when(band: Band | None, calibration: Calibration | None) -> dict[str, Any]:
    now = timezone.now()
    cal = None
    if calibration is not None:
        cal = {"jobs": calibration.jobs, "share_inside": calibration.share_inside, "days": HISTORY_DAYS}
    if band is None:
        return {
            "estimate": None,
            "estimate_note": f"fewer than {MIN_BASIS} comparable past jobs: no band",
            "calibration": cal,
        }
    return {
        "estimate": {
            "start_after": now + timedelta(seconds=band.after_s), "start_by": now + timedelta(seconds=band.by_s),
            "basis": band.basis, "scope": band.scope,
        },
        "estimate_note": f"{round(100 * LOW)}th to {round(100 * HIGH)}th percentile of {band.basis} comparable waits",
        "calibration": cal,
    }  # fmt: skip


def _explained(found: Explanation, ways: tuple[tuple[WayOut, str], ...], age_s: float | None) -> dict[str, Any]:
    return {
        "unit": found.unit,
        "devices": found.devices,
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
            for w, problem in ways
        ],
        "scheduler_says": found.scheduler_says,
        "room": {k: dict(v) for k, v in found.room.items()},
        "observed_at": found.observed_at,
        "age_seconds": None if age_s is None else round(age_s, 1),
    }


def answer_json(answer: Answer) -> dict[str, Any]:
    record = answer.record
    ask = (record.track or {}).get("ask") or {}
    return {
        "cluster": record.cluster.name,
        "workload": record.job_id,
        "job": ask.get("job", ""),
        "owner": record.owner,
        "state": record.state,
        "waiting_since": record.submitted_at,
        **_explained(answer.explanation, answer.ways_out, answer.age_s),
        **_when(answer.estimate, answer.calibration),
        "queue_says": answer.queue_says,
    }


def slurm_answer_json(answer: SlurmAnswer) -> dict[str, Any]:
    job = answer.job
    return {
        "cluster": answer.cluster.name,
        "workload": f"job {job.job_id} ({job.name})",
        "job": f"job/{job.job_id}",
        "owner": job.user,
        "state": job.state.lower(),
        "waiting_since": job.submitted,
        **_explained(answer.explanation, answer.ways_out, answer.age_s),
        **_when(answer.estimate, answer.calibration),
        "queue_says": answer.queue_says,
    }


class ServiceUnavailable(APIException):
    status_code = 503
    default_detail = "the scheduler could not be asked"


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
    record = find_waiting(found, namespace, name)
    if record is None:
        _unknown(found)
    return Response(answer_json(explain_record(readable(request, record))))


STALE_S = 300
"""A live view older than this cannot say that a workload does not exist: one submitted since is not in it."""


def _unknown(cluster: Cluster) -> NoReturn:
    """A workload Allot has not seen: 404 when its view of the cluster is fresh (saying how fresh); 503 saying its
    age when it is stale or was never refreshed — the workload may exist, the usage watcher has not said so."""
    seen = observed_at(cluster)
    age = (timezone.now() - seen).total_seconds() if seen else None
    if age is None or age > STALE_S:
        said = "has never been refreshed" if age is None else f"was last refreshed {age:.0f} s ago"
        raise ServiceUnavailable(
            f"Allot's view of cluster {cluster.name} {said}, so it cannot tell whether that workload exists: the "
            "usage watcher is not keeping it current (see the cluster's page); ask again once it runs"
        )
    raise NotFound(
        f"no such workload on that cluster that you may read (its owner, its unit's members and leads), in "
        f"Allot's view of it refreshed {age:.0f} s ago"
    )


@extend_schema(
    operation_id="waiting_slurm_job",
    responses={200: ANSWER},
    summary="Why a Slurm job waits, and what would make it run",
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def waiting_slurm_job(request: Request, cluster: str, job: str) -> Response:
    """A Slurm job by its id, from the cluster's queue as squeue lists it (read at most every
    ALLOT_SLURM_QUEUE_SECONDS, shared by every process)."""
    found = Cluster.objects.filter(name=cluster, kind=ClusterKind.SLURM).first()
    if found is None:
        raise NotFound(f"cluster {cluster!r}: no such Slurm cluster in Allot (a Kubernetes workload is <ns>/<name>)")
    try:
        answer = explain_slurm_job(found, job)
    except SlurmError as exc:
        raise ServiceUnavailable(f"squeue on {cluster}: {exc}") from exc
    unit = OrgUnit.objects.filter(path=answer.unit_path).values_list("id", flat=True).first() if answer else None
    if answer is None or not may_read_job(request.user, unit, answer.unit_path, answer.job.user):
        raise NotFound(f"job {job} is not in {cluster}'s queue, or is not one you may read")
    return Response(slurm_answer_json(answer))


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
    jobs = unit_waiting_slurm(list(ids), reader=request.user)
    return Response(
        {"unit": unit.path, "waiting": [answer_json(a) for a in answers] + [slurm_answer_json(a) for a in jobs]}
    )
