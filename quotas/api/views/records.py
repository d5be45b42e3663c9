"""What Allot records and reports: the audit trail, sync runs, the policy report, sign-in lockouts."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import selectors
from quotas.access import readable_audit
from quotas.api.serializers.records import AuditOut, SyncRunDetailOut, SyncRunOut, UnlockIn
from quotas.api.views.base import ReadViewSet, parse_input, take_reason
from quotas.models import (
    AuditEvent,
    SyncRun,
)
from quotas.policy.capacity import capacity_report
from quotas.policy.invariants import validate_tree


class AuditFilter(django_filters.FilterSet):
    within = django_filters.CharFilter(method="filter_within", help_text="A unit path: events of it and its subtree.")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["action", "object_type", "object_id", "actor_name"]

    def filter_within(self, queryset: QuerySet[AuditEvent], name: str, value: str) -> QuerySet[AuditEvent]:
        return queryset.filter(selectors.subtree("unit_path", value))


class AuditViewSet(ReadViewSet):
    """The audit trail (read-only: it is append-only)."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditOut
    filterset_class = AuditFilter

    def get_queryset(self) -> QuerySet[AuditEvent]:
        """Each event only for whoever may read what it records (quotas.access.readable_audit)."""
        return readable_audit(self.request.user, super().get_queryset())


class SyncRunViewSet(ReadViewSet):
    """Syncs, dry runs and drift checks, newest first, with per-object outcomes in the detail."""

    queryset = SyncRun.objects.select_related("cluster")
    serializer_class = SyncRunOut
    filterset_fields = {"cluster__name": ["exact"], "status": ["exact"], "mode": ["exact"]}

    def get_serializer_class(self) -> Any:
        return SyncRunDetailOut if self.action == "retrieve" else SyncRunOut

    def get_queryset(self) -> Any:
        queryset = super().get_queryset()
        cluster = self.request.query_params.get("cluster")
        if cluster:
            queryset = queryset.filter(cluster__name=cluster)
        return queryset.prefetch_related("results") if self.action == "retrieve" else queryset


@extend_schema(responses={200: dict})
@api_view(["GET"])
def policy_report(request: Request) -> Response:
    """Check every invariant on the whole tree now, and report capacity per flavor."""
    snapshot = selectors.org_snapshot()
    return Response(
        {
            "revision": selectors.policy_revision(),
            "units": len(snapshot.units),
            "quotas": len(snapshot.quotas),
            "violations": [v.as_dict() for v in validate_tree(snapshot)],
            "capacity": [
                {
                    "flavor": line.flavor,
                    "physical": line.physical,
                    "reserved": line.reserved,
                    "headroom": line.headroom,
                    "reclaimable": line.reclaimable,
                    "promised": line.promised,
                    "left_to_promise": line.left_to_promise,
                }
                for line in capacity_report(snapshot)
            ],
        }
    )


@extend_schema(responses={200: dict})
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def lockouts_view(request: Request) -> Response:
    """Platform admins: sign-ins paused after repeated failures (and addresses close to it)."""
    from quotas.access import NotAllowedError, is_platform_admin
    from quotas.services.signin import lockouts

    if not is_platform_admin(request.user):
        raise NotAllowedError("only a platform admin may see sign-in lockouts")
    return Response(lockouts())


@extend_schema(request=UnlockIn, responses={200: dict})
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def unlock_view(request: Request) -> Response:
    """Platform admins: lift a sign-in lockout (audited, with a reason)."""
    from quotas.services.signin import signin_unlock

    data = parse_input(UnlockIn, request)
    removed = signin_unlock(actor=request.user, reason=take_reason(data), **data)
    return Response({"removed": removed})
