"""Quotas: values in Kubernetes quantity syntax, single and bulk changes, previews."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from quotas.api.serializers.fields import ReasonMixin, Text, quantity_value
from quotas.models import (
    OrgUnit,
    Quota,
    ResourceFlavor,
)
from quotas.policy.quantity import QuantityError, Resource, format_quantity, parse_resource


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
                    attrs[field] = quantity_value(field, resource, attrs[field])
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


class PreviewIn(serializers.Serializer):
    changes = QuotaChangeIn(many=True, allow_empty=False)
