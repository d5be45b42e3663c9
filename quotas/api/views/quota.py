"""Quotas (single edits with If-Match, bulk edits as one change) and the preview of proposed changes."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.decorators import action, api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import selectors, services
from quotas.api.serializers.quota import PreviewIn, QuotaBulkIn, QuotaCreateIn, QuotaOut, QuotaUpdateIn
from quotas.api.views.base import ReadViewSet, parse_if_match, parse_input, quota_changes, take_reason
from quotas.models import (
    Quota,
)
from quotas.policy.quantity import Resource
from quotas.previews import quota_change_preview


class QuotaFilter(django_filters.FilterSet):
    within = django_filters.CharFilter(method="filter_within", help_text="A unit path: its quotas and its subtree's.")
    cluster = django_filters.CharFilter(field_name="flavor__cluster__name")

    class Meta:
        model = Quota
        fields = ["unit", "flavor", "resource"]

    def filter_within(self, queryset: QuerySet[Quota], name: str, value: str) -> QuerySet[Quota]:
        return queryset.filter(selectors.subtree("unit__path", value))


class QuotaViewSet(ReadViewSet):
    """Quotas per unit × flavor × resource. Writes need ``reason``; updates need ``If-Match``."""

    queryset = Quota.objects.select_related("unit", "flavor__cluster").filter(unit__archived_at__isnull=True)
    serializer_class = QuotaOut
    filterset_class = QuotaFilter
    permission_classes = [IsAuthenticated]  # writes: quota_edit checks each unit (quotas.access)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        return Response(QuotaOut(quota).data, headers={"ETag": quota.etag})

    @extend_schema(request=QuotaCreateIn, responses={201: QuotaOut})
    def create(self, request: Request) -> Response:
        """Set a quota that does not exist yet (``version`` 0 is implied); to change one, PATCH it."""
        data = parse_input(QuotaCreateIn, request)
        change = services.QuotaChange(
            data["unit"].pk,
            data["flavor"].pk,
            data["resource"],
            data.get("guarantee"),
            data.get("burst"),
            data.get("lendable"),
            0,  # a create never updates: an existing quota is stale (412, after the access check), PATCH it
        )
        [quota] = services.quota_edit(actor=request.user, reason=take_reason(data), changes=[change])
        quota = self.get_queryset().get(pk=quota.pk)
        return Response(QuotaOut(quota).data, status=status.HTTP_201_CREATED, headers={"ETag": quota.etag})

    @extend_schema(
        request=QuotaUpdateIn,
        responses=QuotaOut,
        parameters=[OpenApiParameter("If-Match", str, OpenApiParameter.HEADER, required=True)],
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        quota = self.get_object()
        expected = parse_if_match(request, quota)
        data = parse_input(QuotaUpdateIn, request, resource=quota.resource)
        reason = take_reason(data)
        change = services.QuotaChange(
            quota.unit_id,
            quota.flavor_id,
            Resource(quota.resource),
            data.get("guarantee"),
            data.get("burst"),
            data.get("lendable"),
            expected,
        )
        [quota] = services.quota_edit(actor=request.user, reason=reason, changes=[change])
        quota = self.get_queryset().get(pk=quota.pk)
        return Response(QuotaOut(quota).data, headers={"ETag": quota.etag})

    update = partial_update

    @extend_schema(request=QuotaBulkIn, responses=QuotaOut(many=True))
    @action(detail=False, methods=["post"])
    def bulk(self, request: Request) -> Response:
        """Set many quotas at once: all are applied or none."""
        data = parse_input(QuotaBulkIn, request)
        changes = quota_changes(data["changes"])
        rows = services.quota_edit(actor=request.user, reason=data["reason"], changes=changes)
        quotas = self.get_queryset().filter(pk__in=[r.pk for r in rows])
        return Response(QuotaOut(quotas, many=True).data)


@extend_schema(request=PreviewIn, responses={200: dict})
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def preview_view(request: Request) -> Response:
    """What proposed quota changes would do: the violations, and per cluster the exact diff (Kueue
    objects on Kubernetes; QOS, accounts and user associations on Slurm). Nothing is saved."""
    data = parse_input(PreviewIn, request)
    changes = quota_changes(data["changes"])
    return Response(quota_change_preview(changes).as_dict())
