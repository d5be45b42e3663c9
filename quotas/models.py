"""Allot's organisation tree, quotas, contracts and audit trail.

Rows hold state only: every change goes through a function in ``quotas.services`` (validated by
the policy core, audited in the same transaction). Invariants a single row can carry are also
database ``CheckConstraint``s.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q

from quotas.policy import Resource, UnitKind

slug_validator = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    "Use lowercase letters, digits and dashes (1–63 characters, starting and ending with a letter "
    "or digit), e.g. 'vision-research'. Kubernetes and Slurm both need this form.",
)
PROTECT = models.PROTECT


class ClusterKind(models.TextChoices):
    KUBERNETES = "kubernetes", "Kubernetes (Kueue)"
    SLURM = "slurm", "Slurm"


class DriftPolicy(models.TextChoices):
    REPORT = "report", "Report drift"
    CORRECT = "correct", "Correct drift"


class SubtreeCeilings(models.TextChoices):
    STRICT = "strict", "Strict: a parent's burst is split among its subtree"
    PERMISSIVE = "permissive", "Permissive: every unit keeps its whole burst"


class Cluster(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    kind = models.CharField(max_length=16, choices=ClusterKind.choices)
    display_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    connection_ref = models.CharField(
        max_length=500,
        blank=True,
        help_text="Where the credentials live, never the credentials: e.g. 'kubeconfig:/etc/allot/west.yaml', "
        "'in-cluster', or 'slurm:lab' (the cluster's name in slurmdbd).",
    )
    enabled = models.BooleanField(default=True)
    drift_policy = models.CharField(max_length=16, choices=DriftPolicy.choices, default=DriftPolicy.REPORT)
    subtree_ceilings = models.CharField(
        max_length=16,
        choices=SubtreeCeilings.choices,
        default=SubtreeCeilings.STRICT,
        help_text="Slurm only. Slurm's QOS limits do not nest, so a subtree's ceiling is not enforced by Slurm: "
        "'strict' splits each parent's burst among the burst QOS of its subtree (no subtree can ever hold more "
        "than its ceiling, but a unit cannot borrow a sibling's unused share); 'permissive' gives every unit "
        "its whole burst (more borrowing, and the coverage report lists the subtrees that may exceed their ceiling).",
    )
    slurm_qos_prefix = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="Slurm only: put before the name of every QOS Allot writes for this cluster (e.g. 'b-' makes "
        "b-guar-nlp). QOS are shared by every cluster of a slurmdbd, so a second Allot cluster in the same "
        "slurmdbd needs one; lowercase letters, digits, '-', '_' or '.'.",
    )
    fairshare_half_life = models.PositiveIntegerField(
        default=7 * 86400,
        help_text="Slurm only: the cluster's PriorityDecayHalfLife in seconds (default 7 days), with which Allot "
        "decays usage when it computes fair-share as Slurm does.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A connection_ref Allot can use for this kind of cluster (issue #15.8: 'bogus' was accepted)."""
        from django.core.exceptions import ValidationError

        ref = self.connection_ref.strip()
        if not ref:
            return
        kind, _, rest = ref.partition(":")
        if self.kind == ClusterKind.SLURM:
            ok = kind == "slurm" and bool(rest)
            forms = "'slurm:<the cluster's name in slurmdbd>'"
        else:
            ok = (
                ref == "in-cluster"
                or (kind == "kubeconfig" and rest.startswith("/"))
                or (kind == "url" and rest.startswith(("http://", "https://")))
            )
            forms = "'kubeconfig:/path/to/kubeconfig[#context]', 'in-cluster' or 'url:https://host:port'"
        if not ok:
            raise ValidationError({"connection_ref": f"{ref!r} is not a connection Allot can use: give {forms}"})


def validate_node_labels(value: object) -> None:
    """Kubernetes' label rules (quotas.policy.labels), so Kueue's webhook never refuses the flavor."""
    from django.core.exceptions import ValidationError

    from quotas.policy.labels import label_problems

    problems = label_problems(value)
    if problems:
        raise ValidationError(problems)


class ResourceFlavor(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=PROTECT, related_name="flavors")
    name = models.CharField(max_length=63, validators=[slug_validator])
    accelerator_model = models.CharField(max_length=100, help_text="e.g. 'NVIDIA A100-SXM4-80GB'")
    device_memory_gb = models.PositiveIntegerField()
    interconnect = models.CharField(max_length=100, blank=True, help_text="e.g. 'NVLink 600 GB/s'")
    physical_devices = models.PositiveIntegerField()
    headroom_devices = models.PositiveIntegerField(
        default=0, help_text="Safety headroom: devices never promised as guarantees (failures, recovery)."
    )
    cpu_capacity = models.BigIntegerField(null=True, blank=True, help_text="Millicores in the pool; empty = unchecked")
    memory_capacity = models.BigIntegerField(null=True, blank=True, help_text="Bytes in the pool; empty = unchecked")
    node_labels = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_node_labels],
        help_text='Kubernetes labels of its nodes (at most 8), e.g. {"nvidia.com/gpu.product": "NVIDIA-H100"}.',
    )
    tolerations = models.JSONField(default=list, blank=True)
    billing_weight = models.DecimalField(max_digits=8, decimal_places=3, default=1)
    queue_order = models.PositiveSmallIntegerField(
        default=0,
        help_text="Position in Kueue ClusterQueues, which try flavors in order; ties go to the lowest "
        "billing weight, so older, cheaper pools fill first.",
    )
    price_per_device_hour = models.DecimalField(max_digits=10, decimal_places=4, default=0)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="flavor_unique_per_cluster"),
            models.CheckConstraint(condition=Q(billing_weight__gte=0), name="flavor_billing_weight_nonneg"),
            models.CheckConstraint(condition=Q(price_per_device_hour__gte=0), name="flavor_price_nonneg"),
        ]

    @property
    def key(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    def __str__(self) -> str:
        return self.key


class WorkloadTier(models.Model):
    name = models.CharField(max_length=8, unique=True, validators=[RegexValidator(r"^P[0-9]$", "Tiers are P0–P9.")])
    display_name = models.CharField(max_length=100)
    priority = models.IntegerField(unique=True, help_text="Kubernetes priority value: larger wins.")
    preemptible = models.BooleanField(default=False)
    opportunistic = models.BooleanField(
        default=False, help_text="Runs on borrowed capacity, yields first, must declare a checkpoint cadence."
    )
    max_runtime = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds; empty = no limit.")
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} {self.display_name}"


class PreemptionPolicy(models.TextChoices):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class WithinQueuePolicy(models.TextChoices):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"


class ReclamationContract(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    description = models.TextField(blank=True)
    reclaim_within = models.PositiveIntegerField(help_text="Seconds: the owner's response-time objective.")
    grace_period = models.PositiveIntegerField(help_text="Seconds from SIGTERM to kill.")
    min_run_window = models.PositiveIntegerField(default=0, help_text="Seconds of run time before preemption.")
    checkpoint_every = models.PositiveIntegerField(
        null=True, blank=True, help_text="Seconds: cadence opportunistic work must declare."
    )
    measured_exit = models.PositiveIntegerField(default=0, help_text="Seconds: measured checkpoint-and-exit time.")
    reclaim_within_cohort = models.CharField(
        max_length=32, choices=PreemptionPolicy.choices, default=PreemptionPolicy.LOWER_PRIORITY
    )
    within_cluster_queue = models.CharField(
        max_length=32, choices=WithinQueuePolicy.choices, default=WithinQueuePolicy.LOWER_PRIORITY
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class OrgUnit(models.Model):
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=PROTECT, related_name="children")
    kind = models.CharField(max_length=16, choices=[(k.value, k.value.title()) for k in UnitKind])
    slug = models.CharField(max_length=63, validators=[slug_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    path = models.CharField(max_length=1000, editable=False, help_text="Slugs from the root, '/'-separated.")
    depth = models.PositiveSmallIntegerField(default=0, editable=False)
    weight = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        default=1,
        validators=[MinValueValidator(0)],
        help_text="Fair-share weight among siblings.",
    )
    leads = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="led_units")
    contract = models.ForeignKey(
        ReclamationContract,
        null=True,
        blank=True,
        on_delete=PROTECT,
        related_name="units",
        help_text="Empty inherits the parent's contract.",
    )
    allowed_tiers = models.ManyToManyField(
        WorkloadTier, blank=True, related_name="units", help_text="Empty inherits the parent's tiers."
    )
    slurm_account = models.CharField(max_length=63, blank=True, validators=[slug_validator])
    kueue_name = models.CharField(
        max_length=253,
        blank=True,
        help_text="Name of its Kueue Cohort/ClusterQueue when adopted from an existing cluster; empty: the "
        "unit path with dots (acme.research.nlp).",
    )
    archived_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(
                fields=["path"], condition=Q(archived_at__isnull=True), name="unit_active_path_unique"
            ),
            models.UniqueConstraint(
                fields=["slurm_account"],
                condition=~Q(slurm_account="") & Q(archived_at__isnull=True),
                name="unit_slurm_account_unique",
            ),
            models.CheckConstraint(condition=Q(weight__gt=0), name="unit_weight_positive"),
        ]
        indexes = [models.Index(fields=["parent"]), models.Index(fields=["path"])]

    def __str__(self) -> str:
        return self.path

    @property
    def active(self) -> bool:
        return self.archived_at is None


class Quota(models.Model):
    unit = models.ForeignKey(OrgUnit, on_delete=PROTECT, related_name="quotas")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=PROTECT, related_name="quotas")
    resource = models.CharField(max_length=32, choices=[(r.value, r.value) for r in Resource])
    guarantee = models.BigIntegerField(default=0)
    burst = models.BigIntegerField(default=0)
    lendable = models.BigIntegerField(default=0)
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["unit__path", "flavor__cluster__name", "flavor__name", "resource"]
        constraints = [
            models.UniqueConstraint(fields=["unit", "flavor", "resource"], name="quota_unique"),
            models.CheckConstraint(condition=Q(guarantee__gte=0), name="quota_guarantee_nonneg"),
            models.CheckConstraint(condition=Q(burst__gte=0), name="quota_burst_nonneg"),
            models.CheckConstraint(
                condition=Q(lendable__gte=0) & Q(lendable__lte=F("guarantee")), name="quota_lendable_within_guarantee"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.unit_id}:{self.flavor_id}:{self.resource}"

    @property
    def etag(self) -> str:
        return f'"q{self.pk}-v{self.version}"'


class CapacityReservation(models.Model):
    flavor = models.ForeignKey(ResourceFlavor, on_delete=PROTECT, related_name="reservations")
    name = models.CharField(max_length=63, validators=[slug_validator])
    devices = models.PositiveIntegerField()
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["flavor__cluster__name", "flavor__name", "name"]
        constraints = [models.UniqueConstraint(fields=["flavor", "name"], name="reservation_unique")]

    def __str__(self) -> str:
        return f"{self.flavor_id}:{self.name}"


class NamespaceBinding(models.Model):
    unit = models.ForeignKey(OrgUnit, on_delete=PROTECT, related_name="namespaces")
    cluster = models.ForeignKey(Cluster, on_delete=PROTECT, related_name="namespaces")
    namespace = models.CharField(max_length=63, validators=[slug_validator])
    local_queue_name = models.CharField(
        max_length=253, blank=True, help_text="Name of its LocalQueue when adopted; empty: the ClusterQueue's name."
    )

    class Meta:
        ordering = ["cluster__name", "namespace"]
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace"], name="namespace_one_unit")]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.namespace}"


class Membership(models.Model):
    unit = models.ForeignKey(OrgUnit, on_delete=PROTECT, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=PROTECT, related_name="memberships"
    )
    slurm_username = models.CharField(max_length=63, blank=True, validators=[slug_validator])

    class Meta:
        ordering = ["unit__path", "slurm_username"]
        constraints = [
            models.UniqueConstraint(
                fields=["unit", "slurm_username"], condition=~Q(slurm_username=""), name="membership_slurm_unique"
            ),
        ]


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


class BudgetPeriod(models.TextChoices):
    MONTH = "month", "Month (UTC)"
    QUARTER = "quarter", "Quarter (UTC)"


class BudgetAction(models.TextChoices):
    REPORT = "report", "Report: findings and mail only"
    NO_BORROWING = "no-borrowing", "No borrowing: keeps its guarantee, may not borrow"
    HOLD = "hold", "Hold: no new workloads start, running ones finish"
    DENY = "deny", "Deny: new workloads are refused at submission"


class Budget(models.Model):
    """Device-hours a unit (with its subtree) may spend on a flavor per period (quotas.policy.budgets)."""

    unit = models.ForeignKey(OrgUnit, on_delete=PROTECT, related_name="budgets")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=PROTECT, related_name="budgets")
    period = models.CharField(max_length=16, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH)
    device_hours = models.PositiveIntegerField(help_text="Device-hours per period.")
    action = models.CharField(max_length=16, choices=BudgetAction.choices, default=BudgetAction.REPORT)
    tiers = models.JSONField(
        default=list, help_text='Tiers it counts and stops, e.g. ["P1", "P2", "P3"]: a serving tier only if named.'
    )
    warn_percent = models.PositiveSmallIntegerField(default=80, help_text="Warn when this share is spent (1–100).")
    carry_over_cap = models.PositiveIntegerField(
        default=0, help_text="Device-hours of last period's unused budget it may carry over; 0: none."
    )
    oversubscription = models.DecimalField(
        max_digits=5,
        decimal_places=2,
        default=1,
        help_text="Its children's budgets on the flavor may add up to this times its own (1: no more than it).",
    )
    starts_on = models.DateField(null=True, blank=True, help_text="First day of its first period; empty: this one.")
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["unit__path", "flavor__cluster__name", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["unit", "flavor"], name="budget_unique"),
            models.CheckConstraint(
                condition=Q(carry_over_cap__lte=F("device_hours")), name="budget_carry_over_within_budget"
            ),
            models.CheckConstraint(
                condition=Q(warn_percent__gte=1) & Q(warn_percent__lte=100), name="budget_warn_percent_range"
            ),
            models.CheckConstraint(condition=Q(oversubscription__gte=1), name="budget_oversubscription_min"),
        ]

    def __str__(self) -> str:
        return f"{self.unit_id}:{self.flavor_id} {self.device_hours}h/{self.period}"

    @property
    def etag(self) -> str:
        return f'"b{self.pk}-v{self.version}"'


class BudgetSpend(models.Model):
    """A budget's period as evaluated after each rollup: spend, allowance and when it warned, ran out and
    was released. Written by the evaluation (quotas.services.budget_spend.budget_spend_record), one row a period."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="spends")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    allowance = models.FloatField(help_text="Device-hours: the budget plus what it carried over.")
    carried = models.FloatField(default=0)
    spent = models.FloatField(default=0)
    rate_per_day = models.FloatField(default=0, help_text="Trailing burn rate, device-hours a day.")
    by_unit = models.JSONField(
        default=dict,
        blank=True,
        help_text="unit id → [inside-guarantee, borrowed × factor] device-hours since Slurm's QOS usage was reset.",
    )
    reset_at = models.DateTimeField(null=True, blank=True, help_text="When Allot last zeroed its Slurm QOS usage.")
    warned_at = models.DateTimeField(null=True, blank=True)
    exhausted_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True, help_text="Raised above its spend after running out.")
    evaluated_at = models.DateTimeField()

    class Meta:
        ordering = ["-period_start", "budget_id"]
        constraints = [models.UniqueConstraint(fields=["budget", "period_start"], name="budget_spend_once")]
