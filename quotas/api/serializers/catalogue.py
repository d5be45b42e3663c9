"""Clusters, flavors, capacity reservations, reclamation contracts and workload tiers: rows out, one
service call's arguments in."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas.api.serializers.fields import DurationField, ReasonMixin, Text, quantity_value
from quotas.models import (
    CapacityReservation,
    Cluster,
    ClusterKind,
    DriftPolicy,
    FlavorSharingMode,
    KueueSharing,
    PreemptionPolicy,
    ReclamationContract,
    ResourceFlavor,
    SubtreeCeilings,
    WithinQueuePolicy,
    WorkloadTier,
)
from quotas.policy.durations import format_duration
from quotas.policy.quantity import Resource


class ClusterOut(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "kind",
            "display_name",
            "description",
            "connection_ref",
            "enabled",
            "drift_policy",
            "subtree_ceilings",
            "slurm_qos_prefix",
            "fairshare_half_life",
            "kueue_sharing",
            "created_at",
        ]


class ClusterIn(ReasonMixin):
    name = Text(max_length=63)
    kind = serializers.ChoiceField(choices=ClusterKind.choices)
    display_name = Text(required=False, allow_blank=True)
    description = Text(required=False, allow_blank=True)
    connection_ref = Text(required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)
    drift_policy = serializers.ChoiceField(choices=DriftPolicy.choices, required=False)
    fairshare_half_life = serializers.IntegerField(
        required=False, min_value=60, help_text=Cluster._meta.get_field("fairshare_half_life").help_text
    )
    subtree_ceilings = serializers.ChoiceField(
        choices=SubtreeCeilings.choices, required=False, help_text=Cluster._meta.get_field("subtree_ceilings").help_text
    )
    kueue_sharing = serializers.ChoiceField(
        choices=KueueSharing.choices, required=False, help_text=Cluster._meta.get_field("kueue_sharing").help_text
    )
    slurm_qos_prefix = Text(
        required=False, allow_blank=True, max_length=16, help_text=Cluster._meta.get_field("slurm_qos_prefix").help_text
    )


class FlavorOut(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    key = serializers.CharField(read_only=True)
    reserved_devices = serializers.SerializerMethodField()
    profile_offers = serializers.SerializerMethodField(
        help_text="A shared flavor's slices: per profile its resource name, its weight in GPU-equivalents (a "
        "fraction, and the millionths Kueue charges), how many one GPU-equivalent holds, and how the weight was found."
    )
    isolation = serializers.SerializerMethodField(help_text="What its sharing contract isolates, in words.")

    class Meta:
        model = ResourceFlavor
        fields = [
            "id",
            "key",
            "cluster",
            "name",
            "accelerator_model",
            "device_memory_gb",
            "interconnect",
            "physical_devices",
            "headroom_devices",
            "reserved_devices",
            "cpu_capacity",
            "memory_capacity",
            "node_labels",
            "tolerations",
            "billing_weight",
            "price_per_device_hour",
            "sharing",
            "isolation",
            "mig_profiles",
            "profile_weights",
            "shares",
            "profile_offers",
        ]

    def get_reserved_devices(self, obj: ResourceFlavor) -> int:
        return sum(r.devices for r in obj.reservations.all())

    def get_isolation(self, obj: ResourceFlavor) -> str:
        return obj.sharing_spec.sharing.isolation

    @extend_schema_field(
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "profile": {"type": "string"},
                    "resource": {"type": "string"},
                    "weight": {"type": "string"},
                    "weight_micro": {"type": "integer"},
                    "per_gpu_equivalent": {"type": "integer"},
                    "rule": {"type": "string"},
                },
            },
        }
    )
    def get_profile_offers(self, obj: ResourceFlavor) -> list[dict[str, Any]]:
        return [
            {
                "profile": p.name,
                "resource": p.resource,
                "weight": str(p.weight),
                "weight_micro": p.micro,
                "per_gpu_equivalent": p.per_gpu,
                "rule": p.rule,
            }
            for p in obj.sharing_spec.profiles
        ]


class FlavorIn(ReasonMixin):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    name = Text(max_length=63)
    accelerator_model = Text()
    device_memory_gb = serializers.IntegerField(min_value=0)
    interconnect = Text(required=False, allow_blank=True)
    physical_devices = serializers.IntegerField(min_value=0)
    headroom_devices = serializers.IntegerField(min_value=0, required=False)
    cpu_capacity = serializers.CharField(required=False, allow_null=True, help_text='e.g. "4800" cores or "500m"')
    memory_capacity = serializers.CharField(required=False, allow_null=True, help_text='e.g. "50Ti"')
    node_labels = serializers.DictField(child=Text(), required=False)
    tolerations = serializers.ListField(child=serializers.DictField(), required=False)
    billing_weight = serializers.DecimalField(max_digits=8, decimal_places=3, min_value=0, required=False)  # type: ignore[arg-type]
    price_per_device_hour = serializers.DecimalField(max_digits=10, decimal_places=4, min_value=0, required=False)  # type: ignore[arg-type]
    sharing = serializers.ChoiceField(choices=FlavorSharingMode.choices, required=False)
    mig_profiles = serializers.ListField(
        child=Text(max_length=16), required=False, help_text='MIG: the profiles its nodes offer, e.g. ["1g.10gb"]'
    )
    profile_weights = serializers.DictField(
        child=Text(max_length=32),
        required=False,
        help_text='MIG: weights that override the rule, e.g. {"3g.40gb": "3/7"}',
    )
    shares = serializers.IntegerField(
        min_value=1, max_value=64, required=False, help_text="MPS / time-slicing: shares per device"
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for field, resource in (("cpu_capacity", Resource.CPU), ("memory_capacity", Resource.MEMORY)):
            if attrs.get(field) is not None:
                attrs[field] = quantity_value(field, resource, attrs[field])
        return attrs


class ReservationOut(serializers.ModelSerializer):
    flavor = serializers.CharField(source="flavor.key", read_only=True)
    flavor_id = serializers.IntegerField(read_only=True)

    class Meta:
        model = CapacityReservation
        fields = ["id", "flavor", "flavor_id", "name", "devices", "description"]


class ReservationIn(ReasonMixin):
    flavor = serializers.PrimaryKeyRelatedField(queryset=ResourceFlavor.objects.select_related("cluster"))
    name = Text(max_length=63)
    devices = serializers.IntegerField(min_value=0)
    description = Text(required=False, allow_blank=True, default="")


class ContractOut(serializers.ModelSerializer):
    display = serializers.SerializerMethodField()

    class Meta:
        model = ReclamationContract
        fields = [
            "id",
            "name",
            "description",
            "reclaim_within",
            "grace_period",
            "min_run_window",
            "checkpoint_every",
            "measured_exit",
            "reclaim_within_cohort",
            "within_cluster_queue",
            "display",
        ]

    def get_display(self, obj: ReclamationContract) -> dict[str, str | None]:
        return {
            f: format_duration(getattr(obj, f)) if getattr(obj, f) is not None else None
            for f in ("reclaim_within", "grace_period", "min_run_window", "checkpoint_every", "measured_exit")
        }


class ContractIn(ReasonMixin):
    name = Text(max_length=63)
    description = Text(required=False, allow_blank=True)
    reclaim_within = DurationField()
    grace_period = DurationField()
    min_run_window = DurationField(required=False)
    checkpoint_every = DurationField(required=False, allow_null=True)
    measured_exit = DurationField(required=False)
    reclaim_within_cohort = serializers.ChoiceField(choices=PreemptionPolicy.choices, required=False)
    within_cluster_queue = serializers.ChoiceField(choices=WithinQueuePolicy.choices, required=False)


class TierOut(serializers.ModelSerializer):
    class Meta:
        model = WorkloadTier
        fields = [
            "id",
            "name",
            "display_name",
            "priority",
            "preemptible",
            "opportunistic",
            "max_runtime",
            "description",
        ]


class TierIn(ReasonMixin):
    name = serializers.RegexField(r"^P[0-9]$", error_messages={"invalid": "Tiers are named P0–P9."})
    display_name = Text()
    priority = serializers.IntegerField(min_value=-(2**31), max_value=2**31 - 1)
    preemptible = serializers.BooleanField(required=False)
    opportunistic = serializers.BooleanField(required=False)
    max_runtime = DurationField(required=False, allow_null=True)
    description = Text(required=False, allow_blank=True)
