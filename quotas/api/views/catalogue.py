"""Clusters (with their sync, preview, drift and coverage actions), flavors, reservations, contracts
and tiers."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import selectors, services
from quotas.api.serializers.catalogue import (
    ClusterIn,
    ClusterOut,
    ContractIn,
    ContractOut,
    FlavorIn,
    FlavorOut,
    ReservationIn,
    ReservationOut,
    TierIn,
    TierOut,
)
from quotas.api.serializers.records import SyncIn
from quotas.api.views.base import CatalogueViewSet, parse_input
from quotas.errors import InputError
from quotas.models import (
    CapacityReservation,
    Cluster,
    ClusterKind,
    ReclamationContract,
    ResourceFlavor,
    WorkloadTier,
)
from quotas.policy.kueue import compile_kueue, render_yaml
from quotas.policy.kueue.config import KueueConfigError, kueue_configuration
from quotas.policy.kueue.coverage import kueue_coverage
from quotas.policy.kueue.target import CompileError
from quotas.policy.slurm.coverage import slurm_coverage
from quotas.policy.slurm.render import qos_script, render_dump
from quotas.policy.slurm.translate import compile_slurm
from quotas.tasks import cluster_sync_start


@extend_schema_view(create=extend_schema(request=ClusterIn), partial_update=extend_schema(request=ClusterIn))
class ClusterViewSet(CatalogueViewSet):
    queryset = Cluster.objects.all()
    serializer_class = ClusterOut
    in_serializer = ClusterIn
    lookup_field = "name"
    filterset_fields = ["kind", "enabled"]

    def set(self, **kwargs: Any) -> Cluster:
        return services.cluster_set(**kwargs)

    @extend_schema(responses={200: dict}, parameters=[OpenApiParameter("kind", str, description="only this kind")])
    @action(detail=True, methods=["get"])
    def kueue(self, request: Request, name: str) -> Response:
        """The Kueue objects Allot wants on this cluster now (what a sync would apply)."""
        cluster = self._kubernetes()
        objects = compile_kueue(selectors.org_snapshot(), selectors.kueue_target(cluster))
        kind = request.query_params.get("kind")
        return Response([o for o in objects if not kind or o["kind"] == kind])

    @extend_schema(
        responses={200: dict},
        parameters=[
            OpenApiParameter(
                "version",
                str,
                enum=["v1beta2", "v1beta1"],
                description="the Configuration version the cluster's Kueue reads: v1beta2 (Kueue v0.15 and newer, "
                "the default) or v1beta1 (v0.13, v0.14)",
            )
        ],
    )
    @action(detail=True, methods=["get"], url_path="kueue-config")
    def kueue_config(self, request: Request, name: str) -> Response:
        """The part of Kueue's own Configuration this cluster needs for what Allot compiles onto it (its
        sharing mode, the fair-share half-life, the labels Kueue copies and promotes onto its metrics):
        ``configuration`` as an object and ``yaml`` to merge into the kueue-manager-config ConfigMap."""
        cluster = self._kubernetes()
        version = request.query_params.get("version", "v1beta2")
        if version not in ("v1beta2", "v1beta1"):
            raise InputError(
                "version", f"{version!r} is not a Kueue configuration version", "use v1beta2 (Kueue v0.15+) or v1beta1"
            )
        try:
            config = kueue_configuration(
                cluster.kueue_sharing,
                cluster.fairshare_half_life,
                version=version,
                profiles=selectors.shared_profiles(cluster),
            )
        except KueueConfigError as exc:
            raise InputError("fairshare_half_life", str(exc)) from exc
        return Response({"cluster": cluster.name, "configuration": config, "yaml": render_yaml([config])})

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def coverage(self, request: Request, name: str) -> Response:
        """For each quota term, contract term and tier rule: whether this cluster enforces it, and how
        (on a Slurm cluster with permissive subtree ceilings, also each subtree that may exceed its ceiling)."""
        cluster = get_object_or_404(Cluster, name=self.kwargs["name"])
        if cluster.kind != ClusterKind.SLURM:
            snapshot = selectors.org_snapshot()
            shared = [
                f.split("/", 1)[1]
                for f, spec in snapshot.flavors.items()
                if f.startswith(f"{cluster.name}/") and spec.sharing.shared
            ]
            try:
                objects = compile_kueue(snapshot, selectors.kueue_target(cluster))
            except CompileError:  # the sync says why; the rest of the report stands
                objects = []
            lines = kueue_coverage(snapshot, sharing=cluster.kueue_sharing, shared=shared, objects=objects)
            return Response([line.as_dict() for line in lines])
        try:
            snapshot, target = selectors.org_snapshot(), selectors.slurm_target(cluster)
        except ValueError as exc:
            raise InputError("connection_ref", str(exc)) from exc
        state = compile_slurm(snapshot, target)
        return Response([line.as_dict() for line in slurm_coverage(snapshot, state, target)])

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def slurm(self, request: Request, name: str) -> Response:
        """What Allot wants on this Slurm cluster now: accounts, user associations, QOS, the
        TRESBillingWeights per flavor, names left out, and the same as a ``sacctmgr dump`` file plus
        the QOS script to run before ``sacctmgr load``."""
        cluster = get_object_or_404(Cluster, name=self.kwargs["name"])
        if cluster.kind != ClusterKind.SLURM:
            raise InputError("cluster", f"{cluster.name} is a {cluster.kind} cluster", "use a Slurm cluster")
        try:
            state = selectors.slurm_desired(cluster)
        except ValueError as exc:
            raise InputError("connection_ref", str(exc)) from exc
        return Response(
            {
                "cluster": state.cluster,
                "accounts": [dataclasses.asdict(a) for a in state.accounts],
                "users": [dataclasses.asdict(u) for u in state.users],
                "qos": [{**dataclasses.asdict(q), "grp_tres": dict(q.grp_tres)} for q in state.qos],
                "billing": dict(state.billing),
                "problems": [dataclasses.asdict(p) for p in state.problems],
                "dump": render_dump(state),
                "qos_script": qos_script(state),
            }
        )

    @extend_schema(request=SyncIn, responses={202: dict})
    @action(detail=True, methods=["post"])
    def sync(self, request: Request, name: str) -> Response:
        """Queue a sync (mode apply, dry_run or drift_check) of a Kubernetes or Slurm cluster; its run
        appears under /api/v1/sync-runs/."""
        cluster = get_object_or_404(Cluster, name=self.kwargs["name"])
        data = parse_input(SyncIn, request)
        cluster_sync_start(actor_id=request.user.pk, cluster=cluster, mode=data["mode"], reason=data["reason"])
        return Response(
            {
                "queued": True,
                "cluster": cluster.name,
                "mode": data["mode"],
                "runs": f"/api/v1/sync-runs/?cluster={cluster.name}",
            },
            status=status.HTTP_202_ACCEPTED,
        )

    def _kubernetes(self) -> Cluster:
        # not get_object(): the list filters (?kind=kubernetes) must not apply to these actions' own params
        cluster = get_object_or_404(Cluster, name=self.kwargs["name"])
        if cluster.kind != ClusterKind.KUBERNETES:
            raise InputError("cluster", f"{cluster.name} is a {cluster.kind} cluster", "use a Kubernetes cluster")
        return cluster


@extend_schema_view(create=extend_schema(request=FlavorIn), partial_update=extend_schema(request=FlavorIn))
class FlavorViewSet(CatalogueViewSet):
    queryset = ResourceFlavor.objects.select_related("cluster").prefetch_related("reservations")
    serializer_class = FlavorOut
    in_serializer = FlavorIn
    key_fields = ("cluster", "name")
    filterset_fields = ["cluster__name", "name"]

    def set(self, **kwargs: Any) -> ResourceFlavor:
        return services.flavor_set(**kwargs)


@extend_schema_view(create=extend_schema(request=ReservationIn), partial_update=extend_schema(request=ReservationIn))
class ReservationViewSet(CatalogueViewSet):
    queryset = CapacityReservation.objects.select_related("flavor__cluster")
    serializer_class = ReservationOut
    in_serializer = ReservationIn
    key_fields = ("flavor", "name")
    filterset_fields = ["flavor"]

    def set(self, **kwargs: Any) -> CapacityReservation:
        return services.reservation_set(**kwargs)

    @extend_schema(parameters=[OpenApiParameter("reason", str, required=True)])
    def destroy(self, request: Request, pk: str) -> Response:
        reservation = self.get_object()
        reason = request.query_params.get("reason") or request.headers.get("X-Allot-Reason", "")
        services.reservation_delete(actor=request.user, reason=reason, reservation=reservation)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(create=extend_schema(request=ContractIn), partial_update=extend_schema(request=ContractIn))
class ContractViewSet(CatalogueViewSet):
    queryset = ReclamationContract.objects.all()
    serializer_class = ContractOut
    in_serializer = ContractIn
    lookup_field = "name"

    def set(self, **kwargs: Any) -> ReclamationContract:
        return services.contract_set(**kwargs)


@extend_schema_view(create=extend_schema(request=TierIn), partial_update=extend_schema(request=TierIn))
class TierViewSet(CatalogueViewSet):
    queryset = WorkloadTier.objects.all()
    serializer_class = TierOut
    in_serializer = TierIn
    lookup_field = "name"

    def set(self, **kwargs: Any) -> WorkloadTier:
        return services.tier_set(**kwargs)
