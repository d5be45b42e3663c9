"""What every quota-pillar view shares: input parsing that names a misplaced field, the reason,
If-Match, the read-only and catalogue view sets."""

from __future__ import annotations

from typing import Any

from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from quotas import services
from quotas.models import (
    Quota,
)


class PreconditionRequired(APIException):
    status_code = 428
    default_detail = "Send If-Match with the quota's current ETag (from GET) so no one else's change is overwritten."
    default_code = "precondition_required"


def parse_input(
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


def quota_changes(items: list[dict[str, Any]]) -> list[services.QuotaChange]:
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


def take_reason(data: dict[str, Any]) -> str:
    return str(data.pop("reason", ""))


class ReadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    pass


class CatalogueViewSet(ReadViewSet):
    """Create and update through one ``<entity>_set`` service. The input serializer requires its
    creation fields on POST and is partial on PATCH; ``key_fields`` identify the row to the service."""

    in_serializer: type[Serializer]
    key_fields: tuple[str, ...] = ("name",)

    def set(self, **kwargs: Any) -> Any:
        raise NotImplementedError

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = parse_input(self.in_serializer, request)
        obj = self.set(actor=request.user, reason=take_reason(data), **data)
        return Response(self.get_serializer(obj).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()
        data = parse_input(self.in_serializer, request, partial=True)
        keys = {field: getattr(obj, field) for field in self.key_fields}
        for field in keys:
            data.pop(field, None)
        obj = self.set(actor=request.user, reason=take_reason(data), **keys, **data)
        return Response(self.get_serializer(obj).data)


def parse_if_match(request: Request, quota: Quota) -> int:
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
