"""MultiKueue fleets: a manager cluster and its ordered workers."""

from __future__ import annotations

from rest_framework import serializers

from quotas.api.serializers.fields import ReasonMixin, Text
from quotas.models import Cluster, Fleet, FleetWorker


class FleetWorkerOut(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = FleetWorker
        fields = ["cluster", "position", "kubeconfig_secret"]


class FleetOut(serializers.ModelSerializer):
    manager: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    workers = FleetWorkerOut(many=True, read_only=True)

    class Meta:
        model = Fleet
        fields = ["id", "name", "manager", "workers", "quota_automation", "description", "created_at"]


class FleetWorkerIn(serializers.Serializer):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    kubeconfig_secret = Text(max_length=253, help_text=FleetWorker._meta.get_field("kubeconfig_secret").help_text)


class FleetIn(ReasonMixin):
    name = Text(max_length=63)
    manager = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    workers = FleetWorkerIn(many=True, help_text="In the order Kueue should nominate them (at most 20).")
    quota_automation = serializers.BooleanField(
        required=False, default=False, help_text=Fleet._meta.get_field("quota_automation").help_text
    )
