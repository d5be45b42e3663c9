"""Change requests: quota changes above the requester's envelope, and their decisions."""

from __future__ import annotations

from rest_framework import serializers

from quotas.api.serializers.fields import ReasonMixin, Text
from quotas.api.serializers.quota import QuotaChangeIn
from quotas.errors import MAX_TEXT
from quotas.models import (
    ChangeRequest,
)


class ChangeRequestIn(ReasonMixin):
    changes = QuotaChangeIn(
        many=True,
        allow_empty=False,
        help_text="Each item's `version` is optional here: the request records the version current when it is "
        "made, and approval refuses it as stale if the quota changed since.",
    )


class ChangeRequestOut(serializers.ModelSerializer):
    unit_path = serializers.CharField(source="unit.path", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, default=None)
    unit_paths = serializers.SerializerMethodField(help_text="Every unit the changes touch.")

    class Meta:
        model = ChangeRequest
        fields = [
            "id",
            "unit",
            "unit_path",
            "unit_paths",
            "requested_by",
            "reason",
            "changes",
            "status",
            "created_at",
            "decided_by",
            "decided_at",
            "decision_comment",
            "outcome",
        ]

    def get_unit_paths(self, obj: ChangeRequest) -> list[str]:
        return sorted(u.path for u in obj.units.all())


class DecisionIn(serializers.Serializer):
    comment = Text(required=False, allow_blank=True, default="", max_length=MAX_TEXT)
