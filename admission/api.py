"""The decision log in the API: a lead sees why a job was refused."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from rest_framework import mixins, serializers, viewsets

from admission.models import AdmissionDecision
from quotas.selectors import subtree


class AdmissionDecisionOut(serializers.ModelSerializer):
    class Meta:
        model = AdmissionDecision
        fields = [
            "id",
            "at",
            "cluster",
            "webhook",
            "uid",
            "namespace",
            "kind",
            "name",
            "operation",
            "allowed",
            "reason",
            "message",
            "unit_path",
            "owner",
            "latency_ms",
        ]


class DecisionFilter(django_filters.FilterSet):
    within = django_filters.CharFilter(method="filter_within", help_text="A unit path: decisions for it and below.")

    class Meta:
        model = AdmissionDecision
        fields = ["namespace", "reason", "allowed", "owner", "cluster", "webhook", "uid"]

    def filter_within(self, queryset: QuerySet[AdmissionDecision], name: str, value: str) -> QuerySet[Any]:
        return queryset.filter(subtree("unit_path", value))


class AdmissionDecisionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Recent admission decisions, newest first (bounded: the oldest are dropped)."""

    queryset = AdmissionDecision.objects.all()
    serializer_class = AdmissionDecisionOut
    filterset_class = DecisionFilter

    def get_queryset(self) -> Any:
        """Who submitted what follows the usage's read rule (issue #40.5): under ALLOT_SHOWBACK_VISIBILITY=leads,
        the decisions of the units one leads and below (admins: all), and one's own (owner or the account that
        submitted it); decisions in namespaces no team holds, to platform admins only."""
        from django.db.models import Q

        from quotas.access import cost_readable_paths, within_any

        rows = super().get_queryset()
        paths = cost_readable_paths(self.request.user)
        if paths is None:
            return rows
        mine = Q(owner=self.request.user.get_username()) if self.request.user.is_authenticated else Q(pk__in=[])
        return rows.filter(within_any("unit_path", paths) | mine)
