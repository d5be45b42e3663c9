"""Change requests above the requester's envelope: submit, approve, reject."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import services
from quotas.access import readable_requests
from quotas.api.serializers.requests import ChangeRequestIn, ChangeRequestOut, DecisionIn
from quotas.api.views.base import ReadViewSet, parse_input, quota_changes
from quotas.errors import form_id
from quotas.models import ChangeRequest, ChangeRequestStatus


class ChangeRequestViewSet(ReadViewSet):
    """Quota changes above the requester's envelope. Anyone signed in may ask for units they lead;
    a lead of a unit above every unit a request changes (or a platform admin) approves or rejects.
    Listed and read by whoever asked, the leads of a unit it changes or above, and platform admins."""

    queryset = ChangeRequest.objects.select_related("unit", "requested_by", "decided_by")
    serializer_class = ChangeRequestOut
    permission_classes = [IsAuthenticated]
    filterset_fields = ["status", "unit"]

    def get_queryset(self) -> QuerySet[ChangeRequest]:
        return (
            readable_requests(self.request.user)
            .select_related("unit", "requested_by", "decided_by")
            .prefetch_related("units")
        )

    @extend_schema(request=ChangeRequestIn, responses={201: ChangeRequestOut})
    def create(self, request: Request) -> Response:
        data = parse_input(ChangeRequestIn, request)
        changes = quota_changes(data["changes"])
        created = services.change_request_submit(actor=request.user, reason=data["reason"], changes=changes)
        return Response(ChangeRequestOut(created).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=DecisionIn,
        responses={200: ChangeRequestOut, 409: ChangeRequestOut},
        description="200 applied; 409 refused as stale (nothing applied: `outcome.detail` says why).",
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        data = parse_input(DecisionIn, request)
        decided = services.change_request_approve(
            actor=request.user, request=self._readable(pk), comment=data.get("comment", "")
        )
        stale = decided.status == ChangeRequestStatus.STALE  # refused, never a success
        return Response(ChangeRequestOut(decided).data, status=status.HTTP_409_CONFLICT if stale else 200)

    @extend_schema(request=DecisionIn, responses=ChangeRequestOut)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        data = parse_input(DecisionIn, request)
        decided = services.change_request_reject(
            actor=request.user, request=self._readable(pk), comment=data.get("comment", "")
        )
        return Response(ChangeRequestOut(decided).data)

    def _readable(self, pk: str) -> ChangeRequest:
        """A request to decide: one the reader may not read is not found (404), as reading it is; one they
        read but may not decide gets the service's 403 naming who decides."""
        return get_object_or_404(self.get_queryset(), pk=form_id(pk))  # "abc" is not found, not a 500
