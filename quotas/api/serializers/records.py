"""What Allot records: the audit trail, sync runs with their per-object outcomes, sign-in unlocks."""

from __future__ import annotations

from rest_framework import serializers

from quotas.api.serializers.fields import ReasonMixin, Text
from quotas.models import (
    AuditEvent,
    SyncMode,
    SyncObject,
    SyncRun,
)


class AuditOut(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "actor_name",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "unit_path",
            "before",
            "after",
            "reason",
        ]


class SyncObjectOut(serializers.ModelSerializer):
    class Meta:
        model = SyncObject
        fields = ["kind", "namespace", "name", "outcome", "changes", "message", "details"]


class SyncRunOut(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = SyncRun
        fields = [
            "id",
            "cluster",
            "mode",
            "status",
            "started_at",
            "finished_at",
            "actor_name",
            "reason",
            "revision",
            "counts",
            "message",
        ]


class SyncRunDetailOut(SyncRunOut):
    results = SyncObjectOut(many=True, read_only=True)

    class Meta(SyncRunOut.Meta):
        fields = [*SyncRunOut.Meta.fields, "results"]


class SyncIn(ReasonMixin):
    mode = serializers.ChoiceField(choices=SyncMode.choices, default=SyncMode.APPLY)


class UnlockIn(ReasonMixin):
    username = Text(max_length=150)
    ip_address = Text(required=False, allow_blank=True, default="", help_text="Only from this address.")
