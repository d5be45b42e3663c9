"""Usage accounting: what ran, for whom, on which flavor, for how long, and hourly rollups.

Sizing (a 10,000-GPU fleet): about 1,000 units × 4 flavors × 744 hours ≈ 3 million ``UsageHour`` rows a
month, and ``Allocation`` rows in the tens of millions a year. Chosen: plain tables with a unique
(unit, flavor, hour) index — every rollup is an upsert on it — and an index on each time column for
the window scans; ``UsageHour`` has no database foreign keys and no per-column unit or flavor index
(each costs a write per row; measured on a month's rollup: 50 s → 29 s without them). The same
schema runs on the embedded SQLite demo; a BRIN index on the hour was tried on PostgreSQL and made
the window's DELETE slower for no gain on the insert. Not chosen yet: declarative partitioning by month. It
pays off when old months are dropped or archived as a whole (detach a partition instead of a
DELETE); Django cannot declare partitioned tables, so it will come as its own migration together
with a retention setting.
"""

from __future__ import annotations

from django.db import models
from django.db.models import FloatField, Q
from django.db.models.functions import Cast, Coalesce

from accounting.policy.findings import FindingKind
from accounting.policy.sacct import EndState
from quotas.models import Cluster, OrgUnit, ResourceFlavor


class SourceKind(models.TextChoices):
    SLURM = "slurm", "Slurm (sacct)"
    KUEUE = "kueue", "Kueue Workloads"
    DCGM = "dcgm", "DCGM via Prometheus"
    KUEUE_METRICS = "kueue_metrics", "Kueue's metrics via Prometheus"
    REPLAY = "replay", "Replay file"


class SourceStatus(models.TextChoices):
    RUNNING = "running"
    OK = "ok"
    PARTIAL = "partial", "ok, with problems"
    FAILED = "failed"


class SourceRun(models.Model):
    """One ingest run of one source: its window, the watermark it reached, what it counted (records,
    unresolved units, bad lines, gaps) and the exact errors. A failed run leaves earlier data alone;
    the next run starts from the last successful watermark."""

    source = models.CharField(max_length=16, choices=SourceKind.choices)
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.CASCADE, related_name="source_runs")
    name = models.CharField(max_length=200, blank=True, help_text="e.g. the replay file")
    status = models.CharField(max_length=16, choices=SourceStatus.choices, default=SourceStatus.RUNNING)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    watermark = models.DateTimeField(null=True, blank=True, help_text="Everything before it is ingested.")
    counts = models.JSONField(default=dict, blank=True)
    problems = models.JSONField(default=list, blank=True, help_text="The first problems: line, text, error.")
    cursor = models.CharField(
        max_length=64, blank=True, help_text="Kueue: the resourceVersion the next watch resumes from."
    )
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["source", "cluster", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.source} {self.cluster_id or self.name} {self.status}"


class WorkloadRecord(models.Model):
    """One admitted workload or Slurm job, kept exactly once per (cluster, scheduler id): a later or
    corrected record replaces the earlier one. Its unit is resolved through namespace bindings or
    the Slurm account; one that maps to no unit is kept (unit empty) and counted."""

    # A million rows a month at a large site: no index that another already covers (cluster leads the
    # unique key, unit leads (unit, flavor)), and no database check per row of unit and flavor — the
    # ingest resolves them from live rows in its transaction; deletes stay protected by Django.
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="workload_records", db_index=False)
    scheduler_id = models.CharField(
        max_length=64, help_text="Kueue Workload UID, or Slurm JobID@first submit (ids repeat after a reset)."
    )
    job_id = models.CharField(max_length=64, blank=True, help_text="The scheduler's own id (Slurm JobID).")
    unit = models.ForeignKey(
        OrgUnit,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="workloads",
        db_index=False,
        db_constraint=False,
    )
    account = models.CharField(max_length=253, blank=True, help_text="The Slurm account or namespace it ran in.")
    owner = models.CharField(max_length=150, blank=True)
    project = models.CharField(max_length=200, blank=True)
    tier = models.CharField(max_length=64, blank=True, help_text="Tier, or the Slurm QOS it ran under.")
    flavor = models.ForeignKey(ResourceFlavor, null=True, blank=True, on_delete=models.PROTECT, db_constraint=False)
    flavor_name = models.CharField(max_length=63, blank=True, help_text="As the scheduler said it.")
    devices = models.PositiveIntegerField(default=0, help_text="Devices, or slices on a shared flavor.")
    equivalents = models.FloatField(
        null=True,
        blank=True,
        help_text="GPU-equivalents held on a shared flavor (slices by weight); empty: its devices.",
    )
    resources = models.JSONField(default=dict, blank=True)
    borrowed = models.PositiveIntegerField(default=0, help_text="Devices above its guarantee at admission.")
    submitted_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=[(s.value, s.value) for s in EndState])
    exit_code = models.CharField(max_length=32, blank=True)
    evictions = models.JSONField(default=list, blank=True, help_text="Each eviction: reason and time.")
    held_seconds = models.BigIntegerField(default=0)
    billing = models.FloatField(
        default=0, help_text="Slurm: billing TRES per second while it ran (fair-share usage = billing × seconds)."
    )
    source_run = models.ForeignKey(SourceRun, null=True, blank=True, on_delete=models.SET_NULL)
    track = models.JSONField(
        null=True,
        blank=True,
        help_text="Kueue: every run and eviction seen of the Workload, folded one observation at a time "
        "(a Workload keeps only the last transition of each condition).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "scheduler_id"], name="workload_once_per_cluster"),
        ]
        indexes = [
            models.Index(fields=["cluster", "job_id"]),
            models.Index(fields=["unit", "flavor"]),
            models.Index(fields=["submitted_at"], name="workload_submitted_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.scheduler_id}"


HELD = Coalesce("equivalents", Cast("devices", FloatField()))
"""What a run or record holds against a guarantee: GPU-equivalents on a shared flavor (slices by weight), else its
devices (a query expression of Allocation and WorkloadRecord)."""


class Allocation(models.Model):
    """One run of a workload holding devices: [start, end), end empty while it runs. A requeued job has
    one per run, so the time it waited between runs is not counted as held. On a shared flavor (MIG, MPS,
    time-slicing) ``devices`` counts slices as the scheduler does and ``equivalents`` what they weigh: the
    rollups charge GPU-equivalent-hours (``COALESCE(equivalents, devices)``), and ``borrowed`` slices in
    proportion."""

    record = models.ForeignKey(WorkloadRecord, on_delete=models.CASCADE, related_name="allocations")
    # Copies of the record's unit and flavor (for the rollups' scans), which the record holds with
    # constraints: no second set of deferred checks per row at commit.
    unit = models.ForeignKey(OrgUnit, null=True, blank=True, on_delete=models.PROTECT, db_constraint=False)
    flavor = models.ForeignKey(ResourceFlavor, null=True, blank=True, on_delete=models.PROTECT, db_constraint=False)
    devices = models.PositiveIntegerField(help_text="Devices, or slices on a shared flavor.")
    equivalents = models.FloatField(
        null=True,
        blank=True,
        help_text="GPU-equivalents held on a shared flavor (slices by weight); empty: its devices.",
    )
    borrowed = models.PositiveIntegerField(
        default=0, help_text="Of its devices (or slices), those above the guarantee."
    )
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)
    run_key = models.CharField(max_length=64, blank=True, help_text="The scheduler's id of this run (Slurm DBIndex).")
    raw_state = models.CharField(max_length=64, blank=True, help_text="How this run ended, as the scheduler said.")
    submitted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(end__isnull=True) | Q(end__gte=models.F("start")), name="allocation_ends_after_start"
            )
        ]
        indexes = [models.Index(fields=["start"], name="allocation_start_idx"), models.Index(fields=["unit", "flavor"])]


class UsageSample(models.Model):
    """A unit's state on a flavor at one minute (the replay source; telemetry sources later)."""

    # Written in bulk (a month is 700,000 rows) from units and flavors the load resolves from live rows
    # in its transaction: no database foreign keys (on SQLite an upsert that may set a foreign-key column
    # took three times as long: 18.5 s against 6.2 s for the demo month). Deletes stay protected by Django.
    # No index of their own either: the unique (unit, flavor, at) index leads with them.
    unit = models.ForeignKey(OrgUnit, on_delete=models.PROTECT, db_constraint=False, db_index=False)
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, db_constraint=False, db_index=False)
    at = models.DateTimeField()
    guarantee = models.PositiveIntegerField()
    lendable = models.PositiveIntegerField(default=0)
    held = models.PositiveIntegerField()
    queued = models.PositiveIntegerField(default=0)
    source_run = models.ForeignKey(SourceRun, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["unit", "flavor", "at"], name="sample_once_per_minute")]
        indexes = [models.Index(fields=["at"], name="sample_at_idx")]


class UsageHour(models.Model):
    """Hourly rollup per unit × flavor, in device-hours. ``minutes`` is how much of the hour had
    telemetry: an hour with none is a gap, never an idle hour. Rebuilt idempotently for any window."""

    # Derived rows, rebuilt from sources that reference units and flavors with constraints: no database
    # foreign key (a deferred check per row at commit was a third of a month's rollup) and no index of
    # their own (the unique index leads with unit). Deletes stay protected by Django (on_delete).
    unit = models.ForeignKey(
        OrgUnit, on_delete=models.PROTECT, related_name="usage_hours", db_constraint=False, db_index=False
    )
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, db_constraint=False, db_index=False)
    hour = models.DateTimeField()
    minutes = models.PositiveSmallIntegerField(help_text="Minutes of the hour with telemetry (0-60).")
    guarantee = models.FloatField(default=0, help_text="Guarantee-hours.")
    allocated = models.FloatField(default=0)
    within = models.FloatField(default=0, help_text="Allocated inside the guarantee.")
    borrowed = models.FloatField(default=0)
    lent = models.FloatField(default=0, help_text="Of its idle guarantee, what others used.")
    pending = models.FloatField(default=0, help_text="Queued demand.")
    active = models.FloatField(null=True, blank=True, help_text="Measured activity; empty without telemetry.")
    productive = models.FloatField(null=True, blank=True)
    productive_estimated = models.BooleanField(default=False)
    minutes_full = models.PositiveSmallIntegerField(default=0, help_text="Minutes held ≥ 90 % of the guarantee.")
    minutes_queued = models.PositiveSmallIntegerField(default=0, help_text="Minutes with queued demand.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["unit", "flavor", "hour"], name="usage_hour_unique")]
        indexes = [models.Index(fields=["hour"], name="usage_hour_idx")]


class ActivityHour(models.Model):
    """Measured GPU activity of a unit on a flavor in one hour, from one cluster's DCGM series:
    ``active`` device-hours (mean activity × time with samples) of ``observed`` device-hours with
    telemetry. Rewritten for the hours each DCGM ingest reads; rolled up into ``UsageHour.active``."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    unit = models.ForeignKey(OrgUnit, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="+")
    hour = models.DateTimeField()
    active = models.FloatField(help_text="Device-hours of measured activity.")
    observed = models.FloatField(help_text="Device-hours with telemetry.")
    productive = models.FloatField(
        null=True, blank=True, help_text="Device-hours of productive work, measured from workloads' progress."
    )
    reporting = models.FloatField(default=0, help_text="Device-hours of the workloads that reported progress.")
    source_run = models.ForeignKey(SourceRun, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "unit", "flavor", "hour"], name="activity_once_per_hour")
        ]
        indexes = [models.Index(fields=["hour"], name="activity_hour_idx")]


class FindingState(models.TextChoices):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"
    DISMISSED = "dismissed"


class Finding(models.Model):
    """Something a detector found (idle guarantee, zombie allocation…): its evidence, the cost at stake
    and a suggested action. One row while the condition lasts — each detection that still sees it
    widens its window — and one open or acknowledged row per key at most."""

    kind = models.CharField(max_length=32, choices=[(k.value, k.value.replace("_", " ")) for k in FindingKind])
    key = models.CharField(max_length=200, help_text="Stays the same while the condition persists.")
    unit = models.ForeignKey(OrgUnit, null=True, blank=True, on_delete=models.PROTECT, related_name="findings")
    flavor = models.ForeignKey(ResourceFlavor, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    summary = models.CharField(max_length=500)
    evidence = models.JSONField(default=dict)
    cost = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True, help_text="At stake; empty: the flavor has no price."
    )
    suggestion = models.TextField()
    action = models.JSONField(null=True, blank=True, help_text="The quota change a lead can request in one click.")
    partial = models.BooleanField(default=False, help_text="Telemetry gaps in the window: the evidence is partial.")
    state = models.CharField(max_length=16, choices=FindingState.choices, default=FindingState.OPEN)
    state_reason = models.TextField(blank=True)
    change_request = models.ForeignKey(
        "quotas.ChangeRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="findings"
    )
    detections = models.PositiveIntegerField(default=1)
    opened_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["key"], condition=Q(state__in=["open", "acknowledged"]), name="finding_one_live_per_key"
            )
        ]
        indexes = [models.Index(fields=["state", "kind"]), models.Index(fields=["key"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} {self.state}"


class Review(models.Model):
    """A monthly governance review of an organisation or department: its files (name → SHA-256; the
    bytes are ``ReviewFile`` rows), the summary and the recommendations (each with the change request
    it became, once accepted). A record: built again, it becomes a new version beside the earlier ones,
    with what differs from the one before; none is ever replaced."""

    unit = models.ForeignKey(OrgUnit, on_delete=models.PROTECT, related_name="reviews")
    month = models.CharField(max_length=7, help_text="YYYY-MM (UTC)")
    version = models.PositiveIntegerField(default=1, help_text="1 for the first build of the month, then 2, 3, …")
    generated_at = models.DateTimeField()
    files = models.JSONField(default=dict)
    summary = models.JSONField(default=dict)
    recommendations = models.JSONField(default=list)
    differs = models.JSONField(
        default=dict, blank=True, help_text="What differs from the version before: files, summary figures."
    )

    class Meta:
        ordering = ["-month", "unit__path", "-version"]
        constraints = [models.UniqueConstraint(fields=["unit", "month", "version"], name="review_version_once")]

    def __str__(self) -> str:
        return f"{self.unit_id} {self.month} v{self.version}"


class ReviewFile(models.Model):
    """One file of a review, kept in the database (so any web process serves it; no shared disk)."""

    review = models.ForeignKey(Review, on_delete=models.CASCADE, related_name="stored_files")
    name = models.CharField(max_length=300, help_text="e.g. review-acme-2020-05.pdf or …-csv/units.csv")
    content = models.BinaryField()
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["review", "name"], name="review_file_once")]

    def __str__(self) -> str:
        return self.name


class FragmentationSample(models.Model):
    """Each hour, per flavor of a cluster: its nodes' free GPUs, how many of them the pending work's
    per-node shapes could use, and the index (accounting.policy.fragmentation)."""

    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(help_text="The hour sampled (UTC).")
    nodes = models.PositiveIntegerField()
    total = models.PositiveIntegerField(help_text="GPUs on the nodes.")
    used = models.PositiveIntegerField()
    free = models.PositiveIntegerField(help_text="On nodes that can start work.")
    usable = models.PositiveIntegerField(help_text="Of the free, what the pending per-node shapes could take.")
    index = models.FloatField(
        help_text="1 - usable / free (0 when nothing is free); usable counts only what a waiting workload that "
        "fits now (its whole gang) could take."
    )
    largest_block = models.PositiveIntegerField(help_text="Most free GPUs on one node.")
    whole_free_nodes = models.PositiveIntegerField()
    pending_gpus = models.PositiveIntegerField()
    waiting = models.JSONField(default=list, help_text="Pending workloads that did not fit, largest first.")
    blocks = models.JSONField(default=dict, help_text="Free GPUs per node -> nodes with that many.")
    placeable = models.JSONField(
        default=dict, help_text="Per-node size of the waiting work -> how many members of that size could start."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["flavor", "at"], name="fragmentation_once_an_hour")]
        ordering = ["-at"]


class MemoryHour(models.Model):
    """A workload's peak device memory in an hour (DCGM framebuffer used, MiB) and the GPUs it held:
    what the over-specification finding compares with each flavor's device memory."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    unit = models.ForeignKey(OrgUnit, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="+")
    workload = models.CharField(max_length=253, help_text="namespace/pod, or 'job <id>' on Slurm.")
    hour = models.DateTimeField()
    peak_mib = models.FloatField()
    devices = models.PositiveSmallIntegerField()
    source_run = models.ForeignKey(SourceRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "workload", "hour"], name="memory_once_an_hour")]
        indexes = [models.Index(fields=["flavor", "hour"])]


class KueueQueueHour(models.Model):
    """Kueue's own numbers for one ClusterQueue, flavor and hour, read from its Prometheus metrics
    (``kueue_cluster_queue_resource_usage`` / ``_reservation``, GPUs; ``kueue_pending_workloads``): what
    Allot's records are checked against (accounting.policy.kueue_crosscheck)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    cluster_queue = models.CharField(max_length=253)
    unit = models.ForeignKey(OrgUnit, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    flavor = models.ForeignKey(ResourceFlavor, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    flavor_name = models.CharField(max_length=63)
    hour = models.DateTimeField()
    usage = models.FloatField(help_text="Average GPUs in use by admitted workloads over the hour.")
    reservation = models.FloatField(help_text="Average GPUs of quota reserved (admitted or waiting for checks).")
    pending = models.FloatField(null=True, blank=True, help_text="Average pending workloads of the queue.")
    source_run = models.ForeignKey(SourceRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "cluster_queue", "flavor_name", "hour"], name="kueue_queue_once_an_hour"
            )
        ]
        indexes = [models.Index(fields=["hour"])]
