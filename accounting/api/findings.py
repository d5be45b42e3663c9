"""Findings in the API: listed under their read rule; acknowledge, dismiss, request the suggested change."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.models import Finding
from accounting.selectors.visibility import visible_findings
from accounting.services.finding_actions import finding_acknowledge, finding_dismiss, finding_request_change
from quotas.selectors import subtree


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
