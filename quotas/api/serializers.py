"""Serializers translate and check shape only; domain rules run in the services and the core.

Output serializers (``*Out``) render rows; input serializers (``*In``) turn JSON into the keyword
arguments of one service call. Quantities accept Kubernetes syntax ("64", "500m", "512Gi") and
durations accept seconds or "15m" / "1h30m" / "PT15M".
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas.errors import MAX_TEXT
from quotas.models import (
    AuditEvent,
    CapacityReservation,
    ChangeRequest,
    Cluster,
    ClusterKind,
    DriftPolicy,
    NamespaceBinding,
    OrgUnit,
    PreemptionPolicy,
    Quota,
    ReclamationContract,
    ResourceFlavor,
    SubtreeCeilings,
    SyncMode,
    SyncObject,
    SyncRun,
    WithinQueuePolicy,
    WorkloadTier,
)
from quotas.policy.durations import DurationError, format_duration, parse_duration
from quotas.policy.quantity import QuantityError, Resource, format_quantity, parse_quantity, parse_resource


@extend_schema_field(
    {
        "oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "example": "15m"}],
        "description": 'Seconds, or a duration such as "15m", "1h30m" or "PT15M"; read back in seconds.',
    }
)
class DurationField(serializers.Field):
    """Seconds on output; seconds or a duration string on input."""

    def to_internal_value(self, data: Any) -> int:
        try:
            return parse_duration(data)
        except DurationError as exc:
            raise serializers.ValidationError(f"{exc}: {exc.hint}") from exc

    def to_representation(self, value: int) -> int:
        return value


class Text(serializers.CharField):
    """A string field that takes only JSON strings: a number or a boolean where text belongs (``"reason":
    5``) is a client's mistake, refused with the field's name rather than turned into "5"."""

    default_error_messages = {"not_text": "Must be a JSON string (text in quotes), not {kind}."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_text", kind=type(data).__name__)
        return str(super().to_internal_value(data))


class ReasonMixin(serializers.Serializer):
    reason = Text(max_length=MAX_TEXT, help_text="Why this change is made; kept in the audit trail.")


# --- clusters, flavors, reservations -------------------------------------------------------


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
    slurm_qos_prefix = Text(
        required=False, allow_blank=True, max_length=16, help_text=Cluster._meta.get_field("slurm_qos_prefix").help_text
    )


class FlavorOut(serializers.ModelSerializer):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    key = serializers.CharField(read_only=True)
    reserved_devices = serializers.SerializerMethodField()

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
        ]

    def get_reserved_devices(self, obj: ResourceFlavor) -> int:
        return sum(r.devices for r in obj.reservations.all())


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

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for field, resource in (("cpu_capacity", Resource.CPU), ("memory_capacity", Resource.MEMORY)):
            if attrs.get(field) is not None:
                attrs[field] = _quantity(field, resource, attrs[field])
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


# --- contracts and tiers ---------------------------------------------------------------------


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


# --- units -------------------------------------------------------------------------------------


class UnitOut(serializers.ModelSerializer):
    # `parent` shadows Field.parent for the type checker only: DRF collects declared fields.
    parent: serializers.PrimaryKeyRelatedField[OrgUnit] = serializers.PrimaryKeyRelatedField(  # type: ignore[assignment]
        read_only=True
    )
    contract: serializers.SlugRelatedField[ReclamationContract] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    leads: Any = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    allowed_tiers: Any = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    namespaces = serializers.SerializerMethodField()
    archived = serializers.SerializerMethodField()

    class Meta:
        model = OrgUnit
        fields = [
            "id",
            "path",
            "slug",
            "name",
            "kind",
            "parent",
            "depth",
            "weight",
            "contract",
            "leads",
            "allowed_tiers",
            "slurm_account",
            "namespaces",
            "description",
            "archived",
            "created_at",
        ]

    def get_namespaces(self, obj: OrgUnit) -> list[str]:
        bindings: list[NamespaceBinding] = list(obj.namespaces.all())
        return sorted(f"{b.cluster.name}/{b.namespace}" for b in bindings)

    def get_archived(self, obj: OrgUnit) -> bool:
        return obj.archived_at is not None


class UnitCreateIn(ReasonMixin):
    parent = serializers.PrimaryKeyRelatedField(  # type: ignore[assignment]  # see UnitOut.parent
        queryset=OrgUnit.objects.all(), allow_null=True
    )
    kind = Text()
    slug = Text(max_length=63)
    name = Text(required=False, allow_blank=True, default="")
    weight = serializers.DecimalField(max_digits=12, decimal_places=4, required=False, default=Decimal(1))
    description = Text(required=False, allow_blank=True, default="")
    contract = serializers.SlugRelatedField(
        slug_field="name", queryset=ReclamationContract.objects.all(), required=False, allow_null=True, default=None
    )
    slurm_account = Text(required=False, allow_blank=True, default="")
    leads: Any = serializers.SlugRelatedField(
        slug_field="username",
        queryset=User.objects.filter(is_active=True),
        many=True,
        required=False,
        default=list,
        help_text="Usernames of its leads (they manage what is inside it).",
    )


class UnitUpdateIn(ReasonMixin):
    name = Text(required=False)
    description = Text(required=False, allow_blank=True)
    weight = serializers.DecimalField(max_digits=12, decimal_places=4, required=False)
    contract = serializers.SlugRelatedField(
        slug_field="name", queryset=ReclamationContract.objects.all(), required=False, allow_null=True
    )
    slurm_account = Text(required=False, allow_blank=True)
    allowed_tiers = serializers.SlugRelatedField(
        slug_field="name", queryset=WorkloadTier.objects.all(), many=True, required=False
    )
    leads: Any = serializers.SlugRelatedField(
        slug_field="username",
        queryset=User.objects.filter(is_active=True),
        many=True,
        required=False,
        help_text="Usernames of its leads: the whole list (an empty list removes them all).",
    )


class UnlockIn(ReasonMixin):
    username = Text(max_length=150)
    ip_address = Text(required=False, allow_blank=True, default="", help_text="Only from this address.")


class MemberIn(ReasonMixin):
    slurm_username = Text(required=False, allow_blank=True, default="", max_length=63)
    user: Any = serializers.SlugRelatedField(
        slug_field="username", queryset=User.objects.all(), required=False, allow_null=True, default=None
    )


class NamespaceIn(ReasonMixin):
    cluster: Any = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    namespace = Text(max_length=63)
    local_queue_name = Text(required=False, allow_blank=True, default="", max_length=253)


class UnitMoveIn(ReasonMixin):
    parent = serializers.PrimaryKeyRelatedField(queryset=OrgUnit.objects.all())  # type: ignore[assignment]


# --- quotas --------------------------------------------------------------------------------------


def _quantity(field: str, resource: Resource, raw: Any) -> int:
    try:
        return parse_quantity(resource, raw)
    except QuantityError as exc:
        raise serializers.ValidationError({field: [f"{exc.message}: {exc.hint}"]}) from exc


class QuotaOut(serializers.ModelSerializer):
    unit_path = serializers.CharField(source="unit.path", read_only=True)
    flavor_key = serializers.CharField(source="flavor.key", read_only=True)
    ceiling = serializers.SerializerMethodField()
    display = serializers.SerializerMethodField()

    class Meta:
        model = Quota
        fields = [
            "id",
            "unit",
            "unit_path",
            "flavor",
            "flavor_key",
            "resource",
            "guarantee",
            "burst",
            "lendable",
            "ceiling",
            "display",
            "version",
            "updated_at",
        ]

    def get_ceiling(self, obj: Quota) -> int:
        return obj.guarantee + obj.burst

    def get_display(self, obj: Quota) -> dict[str, str]:
        resource = Resource(obj.resource)
        return {f: format_quantity(resource, getattr(obj, f)) for f in ("guarantee", "burst", "lendable")} | {
            "ceiling": format_quantity(resource, obj.guarantee + obj.burst)
        }


class QuotaValuesIn(serializers.Serializer):
    """guarantee / burst / lendable, each optional, in quantity syntax for the resource."""

    guarantee = serializers.JSONField(required=False, allow_null=True, help_text='e.g. 8, "64", "500m", "512Gi"')
    burst = serializers.JSONField(required=False, allow_null=True)
    lendable = serializers.JSONField(required=False, allow_null=True)

    def parse_values(self, attrs: dict[str, Any], resource: Resource) -> dict[str, Any]:
        errors: dict[str, list[str]] = {}
        for field in ("guarantee", "burst", "lendable"):
            if field in attrs:
                try:
                    attrs[field] = _quantity(field, resource, attrs[field])
                except serializers.ValidationError as exc:
                    errors.update(exc.detail)  # type: ignore[arg-type]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class QuotaUpdateIn(QuotaValuesIn, ReasonMixin):
    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return self.parse_values(attrs, Resource(self.context["resource"]))


class QuotaChangeIn(QuotaValuesIn):
    unit = serializers.PrimaryKeyRelatedField(queryset=OrgUnit.objects.all())
    flavor = serializers.PrimaryKeyRelatedField(queryset=ResourceFlavor.objects.all())
    resource = Text(help_text='"nvidia.com/gpu" (or "gpu"), "cpu" or "memory"')
    version = serializers.IntegerField(
        required=False, min_value=0, help_text="The version you edited; 0 means 'must not exist yet'."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            attrs["resource"] = parse_resource(attrs["resource"])
        except QuantityError as exc:
            raise serializers.ValidationError({"resource": [f"{exc.message}: {exc.hint}"]}) from exc
        return self.parse_values(attrs, attrs["resource"])


class QuotaCreateIn(QuotaChangeIn, ReasonMixin):
    pass


class QuotaVersionedChangeIn(QuotaChangeIn):
    version = serializers.IntegerField(
        min_value=0,
        help_text="The version you edited (a quota's `version`, from GET; 0 for one that does not exist yet): "
        "required, so a change never overwrites one you did not see.",
        error_messages={
            "required": "Send the version you edited: the quota's `version` from GET (0 for one that does not "
            "exist yet), so a change never overwrites one you did not see."
        },
    )


class QuotaBulkIn(ReasonMixin):
    changes = QuotaVersionedChangeIn(many=True, allow_empty=False)


class ChangeRequestIn(ReasonMixin):
    changes = QuotaChangeIn(
        many=True,
        allow_empty=False,
        help_text="Each item's `version` is optional here: the request records the version current when it is "
        "made, and approval refuses it as stale if the quota changed since.",
    )


# --- audit ---------------------------------------------------------------------------------------


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


# --- sync runs ---------------------------------------------------------------------------------------


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


class PreviewIn(serializers.Serializer):
    changes = QuotaChangeIn(many=True, allow_empty=False)


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
