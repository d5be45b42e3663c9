"""The admin is an inspection console for every model.

Policy objects are read-only here on purpose: a save from the admin would bypass the services, so
it would be neither validated by the policy core nor audited. Changes go through the API or the
portal. Users, groups and API tokens stay editable.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from quotas import models


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.Cluster)
class ClusterAdmin(ReadOnlyAdmin):
    list_display = ["name", "kind", "display_name", "enabled", "drift_policy"]
    list_filter = ["kind", "enabled"]


@admin.register(models.ResourceFlavor)
class FlavorAdmin(ReadOnlyAdmin):
    list_display = ["name", "cluster", "accelerator_model", "physical_devices", "headroom_devices", "billing_weight"]
    list_filter = ["cluster"]


@admin.register(models.OrgUnit)
class OrgUnitAdmin(ReadOnlyAdmin):
    list_display = ["path", "kind", "weight", "contract", "archived_at"]
    list_filter = ["kind", "archived_at"]
    search_fields = ["path", "name"]


@admin.register(models.Quota)
class QuotaAdmin(ReadOnlyAdmin):
    list_display = ["unit", "flavor", "resource", "guarantee", "burst", "lendable", "version"]
    list_filter = ["flavor", "resource"]
    search_fields = ["unit__path"]
    list_select_related = ["unit", "flavor__cluster"]


@admin.register(models.ReclamationContract)
class ContractAdmin(ReadOnlyAdmin):
    list_display = ["name", "reclaim_within", "grace_period", "min_run_window", "checkpoint_every"]


@admin.register(models.WorkloadTier)
class TierAdmin(ReadOnlyAdmin):
    list_display = ["name", "display_name", "priority", "preemptible", "opportunistic", "max_runtime"]


@admin.register(models.CapacityReservation)
class ReservationAdmin(ReadOnlyAdmin):
    list_display = ["name", "flavor", "devices"]


@admin.register(models.NamespaceBinding)
class NamespaceBindingAdmin(ReadOnlyAdmin):
    list_display = ["namespace", "cluster", "unit"]


@admin.register(models.Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ["unit", "user", "slurm_username"]


@admin.register(models.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "object_repr", "reason"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_repr", "unit_path", "reason", "actor_name"]
    date_hierarchy = "at"


class SyncObjectInline(admin.TabularInline):
    model = models.SyncObject
    extra = 0
    fields = readonly_fields = ("kind", "namespace", "name", "outcome", "message")
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "cluster", "mode", "status", "message"]
    list_filter = ["cluster", "mode", "status"]
    inlines = [SyncObjectInline]


@admin.register(models.BeatRun)
class BeatRunAdmin(ReadOnlyAdmin):
    list_display = ("name", "task", "last_run_at", "run_count")
