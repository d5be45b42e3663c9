"""MultiKueue fleets: set one up (audited), and preview every cluster's Kueue objects."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import selectors, services
from quotas.api.serializers.fleets import FleetIn, FleetOut
from quotas.api.views.base import ReadViewSet, parse_input, take_reason
from quotas.errors import InputError
from quotas.models import Fleet
from quotas.policy.kueue.multikueue import compile_fleet
from quotas.policy.kueue.target import CompileError


class FleetViewSet(ReadViewSet):
    """MultiKueue fleets: a manager cluster users submit to and its workers, in the order Kueue nominates
    them. Allot compiles the manager's queues and MultiKueue objects and each worker's queues; each cluster
    then syncs as any other."""

    queryset = Fleet.objects.select_related("manager").prefetch_related("workers__cluster")
    serializer_class = FleetOut
    lookup_field = "name"

    @extend_schema(request=FleetIn, responses={201: FleetOut})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Create or replace a fleet (platform admins)."""
        data = parse_input(FleetIn, request)
        workers = [(w["cluster"], w["kubeconfig_secret"]) for w in data.pop("workers")]
        fleet = services.fleet_set(actor=request.user, reason=take_reason(data), workers=workers, **data)
        return Response(FleetOut(fleet).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def kueue(self, request: Request, name: str) -> Response:
        """What every cluster of the fleet should hold now: cluster name → its Kueue objects."""
        fleet = self.get_object()
        found = selectors.fleet_targets(fleet.manager)
        assert found is not None
        try:
            return Response(compile_fleet(selectors.org_snapshot(), *found))
        except CompileError as exc:
            raise InputError("fleet", str(exc)) from exc
