"""What the tree is built from: clusters, accelerator flavors, workload tiers and reclamation contracts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from quotas.policy.sharing import FlavorSharing, flavor_sharing

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


class KueueSharing(models.TextChoices):
    CLASSIC = "classic", "Classic preemption (Kueue's default)"
    FAIR = "fair", "Kueue fair sharing (preemption by weighted share)"
    ADMISSION = "admission", "Kueue fair sharing with usage-based admission fair sharing"


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
        help_text="The cluster's fair-share half-life in seconds (default 7 days): on Slurm its "
        "PriorityDecayHalfLife, with which Allot decays usage when it computes fair-share as Slurm does; on "
        "Kubernetes with admission fair sharing, Kueue's admissionFairSharing.usageHalfLifeTime (never 0: Kueue "
        "would reset usage at once, silently disabling it).",
    )
    kueue_sharing = models.CharField(
        max_length=16,
        choices=KueueSharing.choices,
        default=KueueSharing.CLASSIC,
        help_text="Kubernetes only: how Kueue shares unused quota. 'classic': preemption by priority, fair-share "
        "weights not used; 'fair': Kueue's fair sharing, units borrow and are preempted by their weighted share "
        "(fairSharing.weight); 'admission': fair sharing plus usage-based admission fair sharing, the queues of "
        "a ClusterQueue take turns by their decayed usage. The Kueue configuration each needs is served with the "
        "cluster (GET /api/v1/clusters/{id}/kueue-config/).",
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
                or (kind == "demo" and rest.replace("-", "").isalnum() and rest.isascii())
            )
            forms = (
                "'kubeconfig:/path/to/kubeconfig[#context]', 'in-cluster' or 'url:https://host:port' "
                "(or 'demo:<name>', the demo's simulated cluster)"
            )
        if not ok:
            raise ValidationError({"connection_ref": f"{ref!r} is not a connection Allot can use: give {forms}"})


def validate_node_labels(value: object) -> None:
    """Kubernetes' label rules (quotas.policy.labels), so Kueue's webhook never refuses the flavor."""
    from django.core.exceptions import ValidationError

    from quotas.policy.labels import label_problems

    problems = label_problems(value)
    if problems:
        raise ValidationError(problems)


def validate_label_value(value: object) -> None:
    """A Kubernetes label value (quotas.policy.labels)."""
    from django.core.exceptions import ValidationError

    from quotas.policy.labels import value_problem

    problem = value_problem(str(value))
    if problem:
        raise ValidationError(f"{value!r} is not a Kubernetes label value: give {problem}")


SHARING_FIELDS = ("sharing", "accelerator_model", "device_memory_gb", "mig_profiles", "profile_weights", "shares")
"""The flavor columns its sharing is read from (``sharing_of``)."""


def sharing_of(row: Mapping[str, Any]) -> FlavorSharing:
    """A flavor's sharing from its ``SHARING_FIELDS`` (a model's or a ``values()`` row's); SharingError naming
    the setting when they cannot be counted."""
    return flavor_sharing(
        row["sharing"],
        accelerator_model=row["accelerator_model"],
        memory_gb=row["device_memory_gb"],
        profiles=row["mig_profiles"] or (),
        weights=row["profile_weights"] or {},
        shares=row["shares"],
    )


class FlavorSharingMode(models.TextChoices):
    WHOLE = "whole", "Whole devices"
    MIG = "mig", "MIG slices (hardware partitions)"
    MPS = "mps", "MPS shares (compute capped, memory shared)"
    TIME_SLICING = "time-slicing", "Time-sliced shares (nothing isolated)"


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
    sharing = models.CharField(
        max_length=16,
        choices=FlavorSharingMode.choices,
        default=FlavorSharingMode.WHOLE,
        help_text="How its devices are shared (the flavor's sharing contract): 'whole' devices (nvidia.com/gpu); "
        "'mig' slices (nvidia.com/mig-<profile>, the device plugin's mixed strategy); 'mps' or 'time-slicing' "
        "shares (nvidia.com/gpu.shared, the device plugin's renameByDefault). A shared flavor's quotas, budgets "
        "and usage are in GPU-equivalents: a whole device is 1, a slice its weight.",
    )
    mig_profiles = models.JSONField(
        default=list,
        blank=True,
        help_text='MIG only: the profiles its nodes are partitioned into, e.g. ["1g.10gb", "3g.40gb"]; empty: '
        "every profile of its part (A100-40GB/80GB, H100-80GB/94GB, H200-141GB, A30-24GB).",
    )
    profile_weights = models.JSONField(
        default=dict,
        blank=True,
        help_text='MIG only: a weight in GPU-equivalents per profile that overrides Allot\'s rule, e.g. {"3g.40gb": '
        '"3/7"}; required for a profile Allot has no figures for. The rule: the larger of the profile\'s compute '
        "share and memory share of the device.",
    )
    shares = models.PositiveSmallIntegerField(
        default=1, help_text="MPS and time-slicing only: shares per device (the device plugin's replicas), 2–64."
    )

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

    @property
    def sharing_summary(self) -> str:
        """Its sharing contract and slices in a line for people: empty for whole devices."""
        spec = self.sharing_spec
        if not spec.shared:
            return ""
        offers = ", ".join(f"{p.name} = {p.weight}" for p in spec.profiles)
        return f"{self.get_sharing_display()}: {offers} GPU-equivalent ({spec.sharing.isolation})"

    @property
    def sharing_spec(self) -> FlavorSharing:
        """Its sharing contract and profiles (quotas.policy.sharing); raises SharingError when unset right."""
        return sharing_of({name: getattr(self, name) for name in SHARING_FIELDS})

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
        max_length=32,
        choices=PreemptionPolicy.choices,
        default=PreemptionPolicy.ANY,
        help_text="Whom lent devices are taken back from when the owner asks: Any (every borrower: the "
        "guarantee always comes back), LowerPriority (only borrowers of a lower tier: spares the same and "
        "higher tiers) or Never (only when borrowers finish).",
    )
    within_cluster_queue = models.CharField(
        max_length=32, choices=WithinQueuePolicy.choices, default=WithinQueuePolicy.LOWER_PRIORITY
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Fleet(models.Model):
    """A MultiKueue fleet: one manager cluster users submit to, and its worker clusters that run the work
    (quotas.policy.kueue.multikueue)."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    manager = models.OneToOneField(Cluster, on_delete=PROTECT, related_name="managed_fleet")
    quota_automation = models.BooleanField(
        default=False,
        help_text="Kueue's MultiKueueManagerQuotaAutomation fills the manager's quotas (quotaManagement: Automated); "
        "off: Allot compiles each unit's quota summed over the workers.",
    )
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class FleetWorker(models.Model):
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="workers")
    cluster = models.OneToOneField(Cluster, on_delete=PROTECT, related_name="fleet_worker")
    position = models.PositiveSmallIntegerField(
        help_text="Its place in the MultiKueueConfig: Kueue nominates in order."
    )
    kubeconfig_secret = models.CharField(
        max_length=253,
        help_text="The Secret (in Kueue's namespace on the manager, key 'kubeconfig') the operator created with "
        "this worker's kubeconfig. Allot only names it.",
    )

    class Meta:
        ordering = ["fleet", "position"]
        constraints = [models.UniqueConstraint(fields=["fleet", "position"], name="fleet_worker_position_unique")]
