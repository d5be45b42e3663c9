"""The organisation tree: units, their members and namespaces, moves and archiving."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import selectors, services
from quotas.api.serializers.fields import ReasonMixin
from quotas.api.serializers.units import MemberIn, NamespaceIn, UnitCreateIn, UnitMoveIn, UnitOut, UnitUpdateIn
from quotas.api.views.base import ReadViewSet, parse_input, take_reason
from quotas.models import (
    OrgUnit,
)


class UnitFilter(django_filters.FilterSet):
    within = django_filters.CharFilter(method="filter_within", help_text="A unit path: that unit and its subtree.")
    archived = django_filters.BooleanFilter(field_name="archived_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = OrgUnit
        fields = ["kind", "parent", "slug", "path"]

    def filter_within(self, queryset: QuerySet[OrgUnit], name: str, value: str) -> QuerySet[OrgUnit]:
        return queryset.filter(selectors.subtree("path", value))


class UnitViewSet(ReadViewSet):
    queryset = OrgUnit.objects.select_related("contract").prefetch_related(
        "leads", "allowed_tiers", "namespaces__cluster"
    )
    serializer_class = UnitOut
    filterset_class = UnitFilter

    @extend_schema(request=UnitCreateIn, responses={201: UnitOut})
    def create(self, request: Request) -> Response:
        data = parse_input(UnitCreateIn, request)
        unit = services.org_unit_create(actor=request.user, reason=take_reason(data), **data)
        return Response(UnitOut(unit).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=UnitUpdateIn, responses=UnitOut)
    def partial_update(self, request: Request, pk: str) -> Response:
        data = parse_input(UnitUpdateIn, request)
        unit = services.org_unit_update(actor=request.user, reason=take_reason(data), unit=self.get_object(), **data)
        return Response(UnitOut(unit).data)

    @extend_schema(request=UnitMoveIn, responses=UnitOut)
    @action(detail=True, methods=["post"])
    def move(self, request: Request, pk: str) -> Response:
        data = parse_input(UnitMoveIn, request)
        unit = services.org_unit_move(
            actor=request.user, reason=take_reason(data), unit=self.get_object(), new_parent=data["parent"]
        )
        return Response(UnitOut(unit).data)

    @extend_schema(request=ReasonMixin, responses=UnitOut)
    @action(detail=True, methods=["post"])
    def archive(self, request: Request, pk: str) -> Response:
        data = parse_input(ReasonMixin, request)
        unit = self.get_object()
        services.org_unit_archive(actor=request.user, reason=take_reason(data), unit=unit)
        unit.refresh_from_db()
        return Response(UnitOut(unit).data)

    @extend_schema(request=ReasonMixin, responses=UnitOut)
    @action(detail=True, methods=["post"])
    def unarchive(self, request: Request, pk: str) -> Response:
        """Bring back an archived unit and what was archived with it (quotas, leads, members)."""
        data = parse_input(ReasonMixin, request)
        unit = self.get_object()
        services.org_unit_unarchive(actor=request.user, reason=take_reason(data), unit=unit)
        unit.refresh_from_db()
        return Response(UnitOut(unit).data)

    @extend_schema(request=MemberIn, responses={200: dict})
    @action(detail=True, methods=["get", "post"])
    def members(self, request: Request, pk: str) -> Response:
        """GET: the unit's members; POST: add one (a portal user, a Slurm username, or both)."""
        unit = self.get_object()
        if request.method == "POST":
            data = parse_input(MemberIn, request)
            services.membership_add(actor=request.user, reason=take_reason(data), unit=unit, **data)
        return Response(_members(unit))

    @extend_schema(request=MemberIn, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="members/remove")
    def remove_member(self, request: Request, pk: str) -> Response:
        unit = self.get_object()
        data = parse_input(MemberIn, request)
        services.membership_remove(actor=request.user, reason=take_reason(data), unit=unit, **data)
        return Response(_members(unit))

    @extend_schema(request=NamespaceIn, responses=UnitOut)
    @action(detail=True, methods=["post"])
    def namespaces(self, request: Request, pk: str) -> Response:
        """Bind a namespace of a Kubernetes cluster to the unit (a namespace belongs to one unit)."""
        unit = self.get_object()
        data = parse_input(NamespaceIn, request)
        services.namespace_bind(actor=request.user, reason=take_reason(data), unit=unit, **data)
        return Response(UnitOut(self.get_object()).data)

    @extend_schema(request=NamespaceIn, responses=UnitOut)
    @action(detail=True, methods=["post"], url_path="namespaces/remove")
    def remove_namespace(self, request: Request, pk: str) -> Response:
        unit = self.get_object()
        data = parse_input(NamespaceIn, request)
        data.pop("local_queue_name", None)
        services.namespace_unbind(actor=request.user, reason=take_reason(data), unit=unit, **data)
        return Response(UnitOut(self.get_object()).data)


def _members(unit: OrgUnit) -> list[dict[str, Any]]:
    return [
        {
            "user": m.user.get_username() if m.user else None,
            "slurm_username": m.slurm_username,
            "slurm_cluster": m.slurm_cluster.name if m.slurm_cluster else None,
        }
        for m in unit.memberships.select_related("user", "slurm_cluster").order_by("slurm_username", "user__username")
    ]
