"""Monthly governance reviews in the API: list, build, download a file, accept a recommendation."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.models import Review
from accounting.selectors.showback import showback_period
from quotas.access import is_platform_admin, led_paths


class ReviewOut(serializers.ModelSerializer):
    unit_path = serializers.CharField(source="unit.path")
    downloads = serializers.SerializerMethodField()

    class Meta:
        model = Review
        fields = [
            "id", "unit_path", "month", "version", "generated_at", "differs", "summary", "recommendations", "files",
            "downloads",
        ]  # fmt: skip

    def get_downloads(self, review: Review) -> list[str]:
        return [f"/reviews/{review.pk}/files/{name}" for name in sorted(review.files)]


class ReviewBuild(serializers.Serializer):
    unit = serializers.CharField(help_text="The path of an organisation or department.")
    month = serializers.RegexField(r"^\d{4}-\d{2}$", help_text="YYYY-MM (UTC).")

    def validate_month(self, value: str) -> str:
        try:
            showback_period(value)
        except ValueError as exc:  # 2020-13, 0000-01, 9999-12
            raise serializers.ValidationError(f"{exc}: give a month such as 2020-05") from exc
        return value


class ReviewAccept(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, help_text="The recommendation's position in the review.")
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class ReviewViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Monthly governance reviews: files with checksums, the summary and one recommendation per
    guarantee. Beat builds last month's on the 1st; ``build`` makes one now (a task whose state
    ``GET /api/v1/reviews/tasks/<id>/`` reports); ``accept`` turns a recommendation into a change request."""

    queryset = Review.objects.select_related("unit")
    serializer_class = ReviewOut
    permission_classes = [IsAuthenticated]
    filterset_fields = ["month"]

    def get_queryset(self) -> Any:
        """Only reviews whose costs the caller may read (showback's rule: ALLOT_SHOWBACK_VISIBILITY)."""
        from accounting.selectors.visibility import readable_reviews

        return readable_reviews(self.request.user).select_related("unit")

    @extend_schema(
        request=ReviewBuild,
        responses={
            202: inline_serializer(
                "ReviewTask", fields={"task": serializers.CharField(), "status": serializers.CharField()}
            )
        },
    )
    @action(detail=False, methods=["post"])
    def build(self, request: Request) -> Response:
        """Build (or rebuild) a review; platform admins and the unit's leads."""
        from accounting.tasks import build_review
        from quotas.models import OrgUnit

        body = ReviewBuild(data=request.data)
        body.is_valid(raise_exception=True)
        unit = OrgUnit.objects.filter(path=body.validated_data["unit"], archived_at__isnull=True).first()
        if unit is None:
            raise serializers.ValidationError({"unit": f"no active unit {body.validated_data['unit']!r}"})
        if not (is_platform_admin(request.user) or unit.path in led_paths(request.user)):
            raise PermissionDenied("platform admins and the unit's leads build its reviews")
        result = build_review.delay(unit.pk, body.validated_data["month"])
        return Response({"task": result.id, "status": result.status}, status=202)

    @extend_schema(
        responses={
            200: inline_serializer(
                "ReviewTaskState",
                fields={
                    "status": serializers.CharField(),
                    "review": serializers.IntegerField(allow_null=True),
                    "detail": serializers.CharField(),
                },
            )
        }
    )
    @action(detail=False, methods=["get"], url_path=r"tasks/(?P<task_id>[\w-]+)")
    def task(self, request: Request, task_id: str) -> Response:
        """Where a build stands: PENDING, PROGRESS (with its step), SUCCESS (with the review) or FAILURE."""
        from celery.result import AsyncResult

        result = AsyncResult(task_id)
        info = result.info if isinstance(result.info, dict) else {}
        review = result.result if result.successful() else None
        detail = str(result.result) if result.failed() else str(info.get("step", ""))
        return Response({"status": result.status, "review": review, "detail": detail})

    @extend_schema(
        request=ReviewAccept,
        responses={200: inline_serializer("ReviewAccepted", fields={"change_request": serializers.IntegerField()})},
    )
    @action(detail=True, methods=["post"])
    def accept(self, request: Request, pk: str | None = None) -> Response:
        """Turn one recommendation into a change request (approved through the usual flow)."""
        from accounting.services.review_accept import review_accept

        body = ReviewAccept(data=request.data)
        body.is_valid(raise_exception=True)
        change = review_accept(
            actor=request.user,
            review=self.get_object(),
            index=body.validated_data["index"],
            reason=body.validated_data["reason"],
        )
        return Response({"change_request": change.pk})
