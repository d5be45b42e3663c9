"""Organisation units, their members, namespaces and moves."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from quotas.api.serializers.fields import ReasonMixin, Text
from quotas.models import (
    Cluster,
    NamespaceBinding,
    OrgUnit,
    ReclamationContract,
    WorkloadTier,
)


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
            "cost_centre",
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
    cost_centre = Text(
        required=False,
        allow_blank=True,
        default="",
        max_length=63,
        help_text="The finance cost centre its spend is charged to (empty: its parent's); a Kubernetes label value.",
    )
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
    cost_centre = Text(
        required=False, allow_blank=True, max_length=63, help_text="The finance cost centre (empty: its parent's)."
    )
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


class MemberIn(ReasonMixin):
    slurm_username = Text(required=False, allow_blank=True, default="", max_length=63)
    user: Any = serializers.SlugRelatedField(
        slug_field="username", queryset=User.objects.all(), required=False, allow_null=True, default=None
    )
    slurm_cluster: Any = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Cluster.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="The one Slurm cluster the member's association is on; omit for every Slurm cluster.",
    )


class NamespaceIn(ReasonMixin):
    cluster: Any = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    namespace = Text(max_length=63)
    local_queue_name = Text(required=False, allow_blank=True, default="", max_length=253)


class UnitMoveIn(ReasonMixin):
    parent = serializers.PrimaryKeyRelatedField(queryset=OrgUnit.objects.all())  # type: ignore[assignment]
