"""One Kueue Workload's record and allocations, written from its folded track
(``accounting.services.kueue`` reads the events and folds them; this module writes what they changed).

Each Workload is one ``WorkloadRecord`` (scheduler id = its UID); its ``Allocation`` rows are rewritten
from the track's runs, each on the flavor it was admitted on. The borrowed part of a run is fixed when it
is first written: how far the unit's devices on that flavor, this run included, went beyond its
guarantee at the run's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from math import ceil

from django.db.models import Q, Sum

from accounting.models import HELD, Allocation, SourceRun, WorkloadRecord
from accounting.policy.equivalents import held, share
from accounting.policy.kueue import Run, WorkloadTrack
from accounting.policy.kueue_track_json import track_to_json
from quotas.models import Cluster, Quota, ResourceFlavor

KEEP_PROBLEMS = 100
GPU = "nvidia.com/gpu"


@dataclass
class Tally:
    counts: dict[str, int] = field(
        default_factory=lambda: {"events": 0, "workloads": 0, "problems": 0, "unresolved_namespace": 0}
    )
    problems: list[dict[str, object]] = field(default_factory=list)
    unresolved: set[str] = field(default_factory=set)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def problem(self, where: str, error: str) -> None:
        self.add("problems")
        if len(self.problems) < KEEP_PROBLEMS:
            self.problems.append({"line": 0, "text": where, "error": error})


def flavors_of(cluster: Cluster) -> dict[str, ResourceFlavor]:
    """Flavor name → flavor. A MultiKueue manager has none of its own: its Workloads (the ones charged, their
    copies on the workers are not) are admitted to flavors named as the workers', the first worker's in the
    fleet's order standing for the name."""
    from quotas.models import Fleet

    found = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster)}
    fleet = Fleet.objects.filter(manager=cluster).first()
    if fleet is not None:  # one query; the first worker's last, so it wins a shared name
        workers = ResourceFlavor.objects.filter(cluster__fleet_worker__fleet=fleet)
        found.update({f.name: f for f in workers.order_by("-cluster__fleet_worker__position")})
    return found


@dataclass(frozen=True)
class Maps:
    units: dict[str, int]
    """Namespace → the unit it is bound to."""
    flavors: dict[str, ResourceFlavor]
    tiers: dict[str, str] = field(default_factory=dict)
    """WorkloadPriorityClass name (``allot-p1``) → tier name (``P1``)."""


def write_record(
    cluster: Cluster, run: SourceRun, record: WorkloadRecord | None, track: WorkloadTrack, tally: Tally, maps: Maps
) -> None:
    unit_id = maps.units.get(track.namespace)
    if unit_id is None:
        tally.add("unresolved_namespace")
        tally.unresolved.add(track.namespace)
    flavor = maps.flavors.get(track.flavor) if track.flavor else None
    if track.devices and track.flavor and flavor is None:
        tally.add("unresolved_flavor")
    record = record or WorkloadRecord(cluster=cluster, scheduler_id=track.uid)
    before = {a.start: a.borrowed for a in record.allocations.all()} if record.pk else {}
    record.job_id = f"{track.namespace}/{track.name}"[:64]
    record.unit_id = unit_id
    record.account = track.namespace
    record.owner, record.project = track.owner, track.project
    record.tier = maps.tiers.get(track.tier, track.tier)  # a WorkloadPriorityClass name → its tier
    record.flavor, record.flavor_name = flavor, track.flavor
    record.devices = track.devices
    record.equivalents = held(track.resources, flavor.sharing_spec) if flavor is not None else None
    record.resources = {**track.resources, "queue": track.queue, "clusterQueue": track.cluster_queue}
    record.submitted_at, record.admitted_at, record.ended_at = track.created, track.admitted, track.ended
    record.state = track.state.value
    record.evictions = [
        {"reason": e.reason, "at": e.at.isoformat() if e.at else None, "message": e.message} for e in track.evictions
    ]
    record.held_seconds = track.held_seconds
    record.source_run = run
    record.track = track_to_json(track)
    allocations = []
    for part in track.runs:
        if not part.devices:
            continue
        # each admission period on the flavor it was admitted on (a Workload preempted on one flavor
        # may come back on another), its borrowed part against that flavor's guarantee
        on = maps.flavors.get(part.flavor) if part.flavor else flavor
        if part.flavor and on is None:
            tally.add("unresolved_flavor")
        weighs = share(held(track.resources, on.sharing_spec), track.devices, part.devices) if on else None
        borrowed = before.get(part.start)
        if borrowed is None:
            borrowed = _borrowed(unit_id, on, part.start, part.devices, weighs, exclude=record.pk)
        allocations.append((part, on, borrowed, weighs))
    record.borrowed = allocations[0][2] if allocations else 0
    evicted = {e.reason for e in track.evictions} | {"readmitted"}
    record.save()
    Allocation.objects.filter(record=record).delete()
    Allocation.objects.bulk_create(
        [
            Allocation(
                record=record,
                unit_id=unit_id,
                flavor=on,
                devices=part.devices,
                equivalents=weighs,
                borrowed=borrowed,
                start=part.start,
                end=part.end,
                run_key=f"{part.start:%Y-%m-%dT%H:%M:%S}",
                raw_state=_raw_state(part, evicted),
                submitted_at=track.created,
            )
            for part, on, borrowed, weighs in allocations
        ]
    )
    tally.add("allocations", len(allocations))


def _raw_state(part: Run, evicted: set[str]) -> str:
    """How a run ended, in words the rollups read: ``evicted <reason>`` when an eviction ended it (it
    lost the work since its last checkpoint), else Kueue's own word (Finished, Deleted…)."""
    words = f"evicted {part.ended_by}" if part.ended_by in evicted else part.ended_by
    return f"reconstructed {words}" if part.reconstructed else words


def _borrowed(
    unit_id: int | None,
    flavor: ResourceFlavor | None,
    start: datetime,
    devices: int,
    equivalents: float | None,
    exclude: int | None,
) -> int:
    """Devices (slices) of this run above the unit's guarantee at its start, counting what the unit already
    held on the flavor then — in GPU-equivalents on a shared flavor (``equivalents``: what the run weighs)."""
    if unit_id is None or flavor is None:
        return 0
    quota = Quota.objects.filter(unit_id=unit_id, flavor=flavor, resource=GPU).values_list("guarantee", flat=True)
    guarantee = quota.first() or 0
    before = (
        Allocation.objects.filter(unit_id=unit_id, flavor=flavor, start__lte=start)
        .filter(Q(end__isnull=True) | Q(end__gt=start))
        .exclude(record_id=exclude)
        .aggregate(n=Sum(HELD))["n"]
        or 0
    )
    weighs = float(devices) if equivalents is None else equivalents
    above = max(0.0, min(weighs, before + weighs - guarantee))
    return min(devices, ceil(above / weighs * devices - 1e-9)) if weighs else 0
