"""The organisation tree and what it promises: units, their quotas and GPU-hour budgets, capacity
reservations, namespace bindings and members."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from quotas.policy import Resource, UnitKind

from .catalogue import (
    PROTECT,
    Cluster,
    ReclamationContract,
    ResourceFlavor,
    WorkloadTier,
    slug_validator,
    validate_label_value,
)


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
    cost_centre = models.CharField(
        max_length=63,
        blank=True,
        validators=[validate_label_value],
        help_text="Optional: the finance cost centre its spend is charged to (empty: its parent's). Stamped on its "
        "Kueue objects as allot.dev/cost-centre, so it must be a Kubernetes label value (letters, digits, '-', '_', "
        "'.'; at most 63).",
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
    slurm_cluster = models.ForeignKey(
        "quotas.Cluster",
        null=True,
        blank=True,
        on_delete=PROTECT,
        related_name="memberships",
        help_text="The one Slurm cluster this member's association is on (an import names the cluster it came "
        "from); empty: every Slurm cluster. A unit gets an account on a cluster only where it has quota or members.",
    )

    class Meta:
        ordering = ["unit__path", "slurm_username"]
        constraints = [
            models.UniqueConstraint(
                fields=["unit", "slurm_username"],
                condition=~Q(slurm_username="") & Q(slurm_cluster__isnull=True),
                name="membership_slurm_unique",
            ),
            models.UniqueConstraint(
                fields=["unit", "slurm_username", "slurm_cluster"],
                condition=~Q(slurm_username="") & Q(slurm_cluster__isnull=False),
                name="membership_slurm_cluster_unique",
            ),
        ]


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
