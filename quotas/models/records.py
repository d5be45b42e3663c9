"""What Allot records: the append-only audit trail, sync runs and their per-object outcomes, change
requests, queue usage observed at sync, beat's runs."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from .catalogue import PROTECT, Cluster
from .tree import OrgUnit


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise TypeError("the audit trail is append-only: AuditEvent rows cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise TypeError("the audit trail is append-only: AuditEvent rows cannot be deleted")


class AuditEvent(models.Model):
    """One state change: who, what, before → after, why. Append-only (also enforced by a
    PostgreSQL trigger)."""

    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=PROTECT, related_name="+")
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=300)
    unit_path = models.CharField(max_length=1000, blank=True, db_index=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField()

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.object_repr}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise TypeError("the audit trail is append-only: AuditEvent rows cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise TypeError("the audit trail is append-only: AuditEvent rows cannot be deleted")


class SyncMode(models.TextChoices):
    APPLY = "apply", "Apply"
    DRY_RUN = "dry_run", "Dry run"
    DRIFT_CHECK = "drift_check", "Drift check"


class SyncStatus(models.TextChoices):
    RUNNING = "running"
    IN_SYNC = "in_sync", "In sync (no change needed)"
    APPLIED = "applied", "Changes applied"
    WOULD_CHANGE = "would_change", "Dry run: changes would be applied"
    DRIFT = "drift", "Drift found (reported)"
    PARTIAL = "partial", "Some objects failed"
    INVALID = "invalid", "Refused before apply: objects failed validation"
    FAILED = "failed", "Failed: the cluster could not be read or written"


class SyncOutcome(models.TextChoices):
    UNCHANGED = "unchanged"
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    WOULD_CREATE = "would_create"
    WOULD_UPDATE = "would_update"
    WOULD_DELETE = "would_delete"
    DRIFT = "drift"
    NOT_OURS = "not_ours", "Exists but is not managed by Allot: left alone"
    INVALID = "invalid"
    CONFLICT = "conflict"
    ERROR = "error"
    BLOCKED = "blocked", "Refused by the cluster for now (e.g. jobs still running): the next sync retries"


class SyncRun(models.Model):
    """One sync (or dry run, or drift check) of one cluster, with a per-object outcome."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sync_runs")
    mode = models.CharField(max_length=16, choices=SyncMode.choices)
    status = models.CharField(max_length=16, choices=SyncStatus.choices, default=SyncStatus.RUNNING)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    revision = models.BigIntegerField(default=0, help_text="Policy revision that was compiled.")
    counts = models.JSONField(default=dict, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.mode} {self.status}"


class SyncObject(models.Model):
    run = models.ForeignKey(SyncRun, on_delete=models.CASCADE, related_name="results")
    kind = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    outcome = models.CharField(max_length=16, choices=SyncOutcome.choices)
    changes = models.JSONField(default=list, blank=True, help_text="Field-level diff: path, desired, actual.")
    message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True, help_text="The server's own error, when there was one.")

    class Meta:
        ordering = ["id"]


class ChangeRequestStatus(models.TextChoices):
    PENDING = "pending", "Waiting for approval"
    APPLIED = "applied", "Approved and applied"
    REJECTED = "rejected", "Rejected"
    STALE = "stale", "Refused at approval: things changed since it was made"


class ChangeRequest(models.Model):
    """A quota change above the requester's envelope, waiting for someone above to decide."""

    unit = models.ForeignKey(
        OrgUnit,
        on_delete=PROTECT,
        related_name="change_requests",
        help_text="The lowest unit at or above every unit the changes touch (where it is listed).",
    )
    units = models.ManyToManyField(
        OrgUnit,
        related_name="touched_by_requests",
        blank=True,
        help_text="Every unit the changes touch: an approver must lead a unit above each (quotas/access.py).",
    )
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=PROTECT, related_name="+")
    reason = models.TextField()
    changes = models.JSONField(help_text="unit, flavor, resource, guarantee, burst, lendable, and the version seen.")
    status = models.CharField(max_length=16, choices=ChangeRequestStatus.choices, default=ChangeRequestStatus.PENDING)
    created_at = models.DateTimeField()
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=PROTECT, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    outcome = models.JSONField(default=dict, blank=True, help_text="Why it went stale, when it did.")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.unit_id} {self.status}"


class QueueUsage(models.Model):
    """The latest usage Kueue reported for a ClusterQueue (status.flavorsUsage), read at each sync."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="queue_usage")
    unit = models.ForeignKey(OrgUnit, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    queue = models.CharField(max_length=253)
    flavor = models.CharField(max_length=63)
    resource = models.CharField(max_length=32)
    total = models.BigIntegerField()
    borrowed = models.BigIntegerField(default=0)
    observed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "queue", "flavor", "resource"], name="queue_usage_unique")
        ]


class BeatRun(models.Model):
    """When Celery beat last sent one of its periodic entries (config/celery.py), for the portal.
    Operational telemetry, written by beat itself; not policy state, so not audited."""

    name = models.CharField(max_length=100, unique=True, help_text="The entry's name in app.conf.beat_schedule.")
    task = models.CharField(max_length=200)
    last_run_at = models.DateTimeField()
    run_count = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_run_at:%Y-%m-%d %H:%M}"
