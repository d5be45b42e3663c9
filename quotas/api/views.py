"""REST API v1: declarations plus one service call per write."""

from __future__ import annotations

import dataclasses
from typing import Any

import django_filters
from django.db import transaction
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action, api_view, permission_classes
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from quotas import selectors, services
from quotas.access import readable_audit, readable_requests
from quotas.errors import InputError
from quotas.models import (
    AuditEvent,
    CapacityReservation,
    ChangeRequest,
    Cluster,
    ClusterKind,
    OrgUnit,
    Quota,
    ReclamationContract,
    ResourceFlavor,
    SyncRun,
    WorkloadTier,
)
from quotas.policy.capacity import capacity_report
from quotas.policy.invariants import validate_tree
from quotas.policy.kueue import compile_kueue
from quotas.policy.kueue.coverage import kueue_coverage
from quotas.policy.quantity import Resource
from quotas.policy.slurm.coverage import slurm_coverage
from quotas.policy.slurm.render import qos_script, render_dump
from quotas.policy.slurm.translate import compile_slurm
from quotas.previews import quota_change_preview
from quotas.tasks import cluster_sync_task

from . import serializers as s


class PreconditionRequired(APIException):
    status_code = 428
    default_detail = "Send If-Match with the quota's current ETag (from GET) so no one else's change is overwritten."
    default_code = "precondition_required"


def _input(
    serializer_class: type[Serializer], request: Request, *, partial: bool = False, **context: Any
) -> dict[str, Any]:
    serializer = serializer_class(data=request.data, partial=partial, context={"request": request, **context})
    if isinstance(request.data, dict):
        unknown = sorted(set(request.data) - set(serializer.fields) - {"csrfmiddlewaretoken"})
        if unknown:  # a field sent but not taken here would be silently dropped: say where it goes
            raise ValidationError(
                {
                    name: [ELSEWHERE.get(name, f"not a field here: this endpoint takes {', '.join(serializer.fields)}")]
                    for name in unknown
                }
            )
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


ELSEWHERE = {
    "members": "not set here: add a member with POST /api/v1/units/{id}/members/ and remove one with "
    "POST /api/v1/units/{id}/members/remove/",
    "namespaces": "not set here: bind a namespace with POST /api/v1/units/{id}/namespaces/ and release one with "
    "POST /api/v1/units/{id}/namespaces/remove/",
    "parent": "not set here: move a unit with POST /api/v1/units/{id}/move/",
    "archived": "not set here: POST /api/v1/units/{id}/archive/ or /unarchive/",
    "path": "derived from the parent and the slug: move the unit or create a new one",
}
"""Where a field that an endpoint does not take is set instead."""


def _quota_changes(items: list[dict[str, Any]]) -> list[services.QuotaChange]:
    """Validated QuotaChangeIn items → the services' QuotaChange."""
    return [
        services.QuotaChange(
            c["unit"].pk,
            c["flavor"].pk,
            c["resource"],
            c.get("guarantee"),
            c.get("burst"),
            c.get("lendable"),
            c.get("version"),
        )
        for c in items
    ]


def _reason(data: dict[str, Any]) -> str:
    return str(data.pop("reason", ""))


class ReadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    pass


# --- clusters, flavors, reservations, contracts, tiers ---------------------------------------------


class CatalogueViewSet(ReadViewSet):
    """Create and update through one ``<entity>_set`` service. The input serializer requires its
    creation fields on POST and is partial on PATCH; ``key_fields`` identify the row to the service."""

    in_serializer: type[Serializer]
    key_fields: tuple[str, ...] = ("name",)

    def set(self, **kwargs: Any) -> Any:
        raise NotImplementedError

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = _input(self.in_serializer, request)
        obj = self.set(actor=request.user, reason=_reason(data), **data)
        return Response(self.get_serializer(obj).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()
        data = _input(self.in_serializer, request, partial=True)
        keys = {field: getattr(obj, field) for field in self.key_fields}
        for field in keys:
            data.pop(field, None)
        obj = self.set(actor=request.user, reason=_reason(data), **keys, **data)
        return Response(self.get_serializer(obj).data)


@extend_schema_view(create=extend_schema(request=s.ClusterIn), partial_update=extend_schema(request=s.ClusterIn))
class ClusterViewSet(CatalogueViewSet):
    queryset = Cluster.objects.all()
    serializer_class = s.ClusterOut
    in_serializer = s.ClusterIn
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

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def coverage(self, request: Request, name: str) -> Response:
        """For each quota term, contract term and tier rule: whether this cluster enforces it, and how
        (on a Slurm cluster with permissive subtree ceilings, also each subtree that may exceed its ceiling)."""
        cluster = get_object_or_404(Cluster, name=self.kwargs["name"])
        if cluster.kind != ClusterKind.SLURM:
            return Response([line.as_dict() for line in kueue_coverage(selectors.org_snapshot(include_quotas=False))])
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

    @extend_schema(request=s.SyncIn, responses={202: dict})
    @action(detail=True, methods=["post"])
    def sync(self, request: Request, name: str) -> Response:
        """Queue a sync (mode apply, dry_run or drift_check) of a Kubernetes or Slurm cluster; its run
        appears under /api/v1/sync-runs/."""
        cluster = get_object_or_404(Cluster, name=self.kwargs["name"])
        data = _input(s.SyncIn, request)
        reason = services.audit.require_reason(data["reason"])
        transaction.on_commit(lambda: cluster_sync_task.delay(cluster.pk, data["mode"], reason))
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


@extend_schema_view(create=extend_schema(request=s.FlavorIn), partial_update=extend_schema(request=s.FlavorIn))
class FlavorViewSet(CatalogueViewSet):
    queryset = ResourceFlavor.objects.select_related("cluster").prefetch_related("reservations")
    serializer_class = s.FlavorOut
    in_serializer = s.FlavorIn
    key_fields = ("cluster", "name")
    filterset_fields = ["cluster__name", "name"]

    def set(self, **kwargs: Any) -> ResourceFlavor:
        return services.flavor_set(**kwargs)


@extend_schema_view(
    create=extend_schema(request=s.ReservationIn), partial_update=extend_schema(request=s.ReservationIn)
)
class ReservationViewSet(CatalogueViewSet):
    queryset = CapacityReservation.objects.select_related("flavor__cluster")
    serializer_class = s.ReservationOut
    in_serializer = s.ReservationIn
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


@extend_schema_view(create=extend_schema(request=s.ContractIn), partial_update=extend_schema(request=s.ContractIn))
class ContractViewSet(CatalogueViewSet):
    queryset = ReclamationContract.objects.all()
    serializer_class = s.ContractOut
    in_serializer = s.ContractIn
    lookup_field = "name"

    def set(self, **kwargs: Any) -> ReclamationContract:
        return services.contract_set(**kwargs)


@extend_schema_view(create=extend_schema(request=s.TierIn), partial_update=extend_schema(request=s.TierIn))
class TierViewSet(CatalogueViewSet):
    queryset = WorkloadTier.objects.all()
    serializer_class = s.TierOut
    in_serializer = s.TierIn
    lookup_field = "name"

    def set(self, **kwargs: Any) -> WorkloadTier:
        return services.tier_set(**kwargs)


# --- units -------------------------------------------------------------------------------------------


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
    serializer_class = s.UnitOut
    filterset_class = UnitFilter

    @extend_schema(request=s.UnitCreateIn, responses={201: s.UnitOut})
    def create(self, request: Request) -> Response:
        data = _input(s.UnitCreateIn, request)
        unit = services.org_unit_create(actor=request.user, reason=_reason(data), **data)
        return Response(s.UnitOut(unit).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.UnitUpdateIn, responses=s.UnitOut)
    def partial_update(self, request: Request, pk: str) -> Response:
        data = _input(s.UnitUpdateIn, request)
        unit = services.org_unit_update(actor=request.user, reason=_reason(data), unit=self.get_object(), **data)
        return Response(s.UnitOut(unit).data)

    @extend_schema(request=s.UnitMoveIn, responses=s.UnitOut)
    @action(detail=True, methods=["post"])
    def move(self, request: Request, pk: str) -> Response:
        data = _input(s.UnitMoveIn, request)
        unit = services.org_unit_move(
            actor=request.user, reason=_reason(data), unit=self.get_object(), new_parent=data["parent"]
        )
        return Response(s.UnitOut(unit).data)

    @extend_schema(request=s.ReasonMixin, responses=s.UnitOut)
    @action(detail=True, methods=["post"])
    def archive(self, request: Request, pk: str) -> Response:
        data = _input(s.ReasonMixin, request)
        unit = self.get_object()
        services.org_unit_archive(actor=request.user, reason=_reason(data), unit=unit)
        unit.refresh_from_db()
        return Response(s.UnitOut(unit).data)

    @extend_schema(request=s.ReasonMixin, responses=s.UnitOut)
    @action(detail=True, methods=["post"])
    def unarchive(self, request: Request, pk: str) -> Response:
        """Bring back an archived unit and what was archived with it (quotas, leads, members)."""
        data = _input(s.ReasonMixin, request)
        unit = self.get_object()
        services.org_unit_unarchive(actor=request.user, reason=_reason(data), unit=unit)
        unit.refresh_from_db()
        return Response(s.UnitOut(unit).data)

    @extend_schema(request=s.MemberIn, responses={200: dict})
    @action(detail=True, methods=["get", "post"])
    def members(self, request: Request, pk: str) -> Response:
        """GET: the unit's members; POST: add one (a portal user, a Slurm username, or both)."""
        unit = self.get_object()
        if request.method == "POST":
            data = _input(s.MemberIn, request)
            services.membership_add(actor=request.user, reason=_reason(data), unit=unit, **data)
        return Response(_members(unit))

    @extend_schema(request=s.MemberIn, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="members/remove")
    def remove_member(self, request: Request, pk: str) -> Response:
        unit = self.get_object()
        data = _input(s.MemberIn, request)
        services.membership_remove(actor=request.user, reason=_reason(data), unit=unit, **data)
        return Response(_members(unit))

    @extend_schema(request=s.NamespaceIn, responses=s.UnitOut)
    @action(detail=True, methods=["post"])
    def namespaces(self, request: Request, pk: str) -> Response:
        """Bind a namespace of a Kubernetes cluster to the unit (a namespace belongs to one unit)."""
        unit = self.get_object()
        data = _input(s.NamespaceIn, request)
        services.namespace_bind(actor=request.user, reason=_reason(data), unit=unit, **data)
        return Response(s.UnitOut(self.get_object()).data)

    @extend_schema(request=s.NamespaceIn, responses=s.UnitOut)
    @action(detail=True, methods=["post"], url_path="namespaces/remove")
    def remove_namespace(self, request: Request, pk: str) -> Response:
        unit = self.get_object()
        data = _input(s.NamespaceIn, request)
        data.pop("local_queue_name", None)
        services.namespace_unbind(actor=request.user, reason=_reason(data), unit=unit, **data)
        return Response(s.UnitOut(self.get_object()).data)


def _members(unit: OrgUnit) -> list[dict[str, Any]]:
    return [
        {"user": m.user.get_username() if m.user else None, "slurm_username": m.slurm_username}
        for m in unit.memberships.select_related("user").order_by("slurm_username", "user__username")
    ]


# --- quotas --------------------------------------------------------------------------------------------


class QuotaFilter(django_filters.FilterSet):
    within = django_filters.CharFilter(method="filter_within", help_text="A unit path: its quotas and its subtree's.")
    cluster = django_filters.CharFilter(field_name="flavor__cluster__name")

    class Meta:
        model = Quota
        fields = ["unit", "flavor", "resource"]

    def filter_within(self, queryset: QuerySet[Quota], name: str, value: str) -> QuerySet[Quota]:
        return queryset.filter(selectors.subtree("unit__path", value))


def _parse_if_match(request: Request, quota: Quota) -> int:
    header = request.headers.get("If-Match", "").strip()
    if not header:
        raise PreconditionRequired(f"Send If-Match: {quota.etag} (this quota's current ETag) with the change.")
    if header == "*":  # "any version" would overwrite whatever someone else saved in between
        raise PreconditionRequired(
            f"If-Match: * is not accepted: send If-Match: {quota.etag} (the ETag of the version you edited, from GET)."
        )
    tag = header.removeprefix("W/").strip('"')
    prefix = f"q{quota.pk}-v"
    number = tag[len(prefix) :]
    if not tag.startswith(prefix) or not (number.isascii() and number.isdigit() and len(number) < 19):
        return -1  # an ETag of something else: never current
    return int(tag[len(prefix) :])


class QuotaViewSet(ReadViewSet):
    """Quotas per unit × flavor × resource. Writes need ``reason``; updates need ``If-Match``."""

    queryset = Quota.objects.select_related("unit", "flavor__cluster").filter(unit__archived_at__isnull=True)
    serializer_class = s.QuotaOut
    filterset_class = QuotaFilter
    permission_classes = [IsAuthenticated]  # writes: quota_edit checks each unit (quotas.access)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        return Response(s.QuotaOut(quota).data, headers={"ETag": quota.etag})

    @extend_schema(request=s.QuotaCreateIn, responses={201: s.QuotaOut})
    def create(self, request: Request) -> Response:
        """Set a quota that does not exist yet (``version`` 0 is implied); to change one, PATCH it."""
        data = _input(s.QuotaCreateIn, request)
        change = services.QuotaChange(
            data["unit"].pk,
            data["flavor"].pk,
            data["resource"],
            data.get("guarantee"),
            data.get("burst"),
            data.get("lendable"),
            0,  # a create never updates: an existing quota is stale (412, after the access check), PATCH it
        )
        [quota] = services.quota_edit(actor=request.user, reason=_reason(data), changes=[change])
        quota = self.get_queryset().get(pk=quota.pk)
        return Response(s.QuotaOut(quota).data, status=status.HTTP_201_CREATED, headers={"ETag": quota.etag})

    @extend_schema(
        request=s.QuotaUpdateIn,
        responses=s.QuotaOut,
        parameters=[OpenApiParameter("If-Match", str, OpenApiParameter.HEADER, required=True)],
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        quota = self.get_object()
        expected = _parse_if_match(request, quota)
        data = _input(s.QuotaUpdateIn, request, resource=quota.resource)
        reason = _reason(data)
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
        return Response(s.QuotaOut(quota).data, headers={"ETag": quota.etag})

    update = partial_update

    @extend_schema(request=s.QuotaBulkIn, responses=s.QuotaOut(many=True))
    @action(detail=False, methods=["post"])
    def bulk(self, request: Request) -> Response:
        """Set many quotas at once: all are applied or none."""
        data = _input(s.QuotaBulkIn, request)
        changes = _quota_changes(data["changes"])
        rows = services.quota_edit(actor=request.user, reason=data["reason"], changes=changes)
        quotas = self.get_queryset().filter(pk__in=[r.pk for r in rows])
        return Response(s.QuotaOut(quotas, many=True).data)


# --- sync runs and previews -------------------------------------------------------------------------


class SyncRunViewSet(ReadViewSet):
    """Syncs, dry runs and drift checks, newest first, with per-object outcomes in the detail."""

    queryset = SyncRun.objects.select_related("cluster")
    serializer_class = s.SyncRunOut
    filterset_fields = {"cluster__name": ["exact"], "status": ["exact"], "mode": ["exact"]}

    def get_serializer_class(self) -> Any:
        return s.SyncRunDetailOut if self.action == "retrieve" else s.SyncRunOut

    def get_queryset(self) -> Any:
        queryset = super().get_queryset()
        cluster = self.request.query_params.get("cluster")
        if cluster:
            queryset = queryset.filter(cluster__name=cluster)
        return queryset.prefetch_related("results") if self.action == "retrieve" else queryset


@extend_schema(request=s.PreviewIn, responses={200: dict})
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def preview_view(request: Request) -> Response:
    """What proposed quota changes would do: the violations, and per cluster the exact diff (Kueue
    objects on Kubernetes; QOS, accounts and user associations on Slurm). Nothing is saved."""
    data = _input(s.PreviewIn, request)
    changes = _quota_changes(data["changes"])
    return Response(quota_change_preview(changes).as_dict())


# --- sign-in lockouts ---------------------------------------------------------------------------------


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


@extend_schema(request=s.UnlockIn, responses={200: dict})
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def unlock_view(request: Request) -> Response:
    """Platform admins: lift a sign-in lockout (audited, with a reason)."""
    from quotas.services.signin import signin_unlock

    data = _input(s.UnlockIn, request)
    removed = signin_unlock(actor=request.user, reason=_reason(data), **data)
    return Response({"removed": removed})


# --- change requests ------------------------------------------------------------------------------------


class ChangeRequestViewSet(ReadViewSet):
    """Quota changes above the requester's envelope. Anyone signed in may ask for units they lead;
    a lead of a unit above every unit a request changes (or a platform admin) approves or rejects.
    Listed and read by whoever asked, the leads of a unit it changes or above, and platform admins."""

    queryset = ChangeRequest.objects.select_related("unit", "requested_by", "decided_by")
    serializer_class = s.ChangeRequestOut
    permission_classes = [IsAuthenticated]
    filterset_fields = ["status", "unit"]

    def get_queryset(self) -> QuerySet[ChangeRequest]:
        return (
            readable_requests(self.request.user)
            .select_related("unit", "requested_by", "decided_by")
            .prefetch_related("units")
        )

    @extend_schema(request=s.ChangeRequestIn, responses={201: s.ChangeRequestOut})
    def create(self, request: Request) -> Response:
        data = _input(s.ChangeRequestIn, request)
        changes = _quota_changes(data["changes"])
        created = services.change_request_submit(actor=request.user, reason=data["reason"], changes=changes)
        return Response(s.ChangeRequestOut(created).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.DecisionIn, responses=s.ChangeRequestOut)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        data = _input(s.DecisionIn, request)
        decided = services.change_request_approve(
            actor=request.user, request=_any_request(pk), comment=data.get("comment", "")
        )
        return Response(s.ChangeRequestOut(decided).data)

    @extend_schema(request=s.DecisionIn, responses=s.ChangeRequestOut)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        data = _input(s.DecisionIn, request)
        decided = services.change_request_reject(
            actor=request.user, request=_any_request(pk), comment=data.get("comment", "")
        )
        return Response(s.ChangeRequestOut(decided).data)


def _any_request(pk: str) -> ChangeRequest:
    """A request to decide, readable or not: the service answers 403 with who may decide it."""
    return get_object_or_404(ChangeRequest, pk=pk)


# --- audit and reports -----------------------------------------------------------------------------------


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
    serializer_class = s.AuditOut
    filterset_class = AuditFilter

    def get_queryset(self) -> QuerySet[AuditEvent]:
        """Each event only for whoever may read what it records (quotas.access.readable_audit)."""
        return readable_audit(self.request.user, super().get_queryset())


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
