"""The demo's inference team on MIG slices (issue #45.7): ``acme/production/inference`` serves models on
Kubernetes West's H100 MIG flavor (``h100-mig``: 16 H100s cut into 1g.10gb and 3g.40gb slices) beside the whole-GPU
training teams, through the research demo's recent month.

Its deployments scale by day: chat-small (1g.10gb replicas, 1/7 of a GPU-equivalent each) 7 at night, 14 in a
working day's daytime (08:00–20:00 UTC) and 10 at weekends; chat-large (3g.40gb, 1/2 each) 2, 4 in a working day;
embed (1g.10gb) 3 always. Each replica's run is a Kueue workload record with its allocation — its slices as the
scheduler counts them and what they weigh — and the hourly rollups are what ``usage_rollup`` makes of those
allocations (tests/accounting/test_inference_demo.py rebuilds a day and compares). Deterministic, idempotent; a
reconstruction, not a trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from fractions import Fraction

from django.db import transaction

from accounting.demo_research import research_window
from accounting.models import Allocation, SourceKind, SourceRun, SourceStatus, UsageHour, WorkloadRecord
from accounting.policy.equivalents import held
from accounting.services.usage_version import usage_changed
from quotas import services
from quotas.demo import demo_user
from quotas.models import Cluster, OrgUnit, ResourceFlavor
from quotas.policy import Resource

REASON = "demo: an inference team on MIG slices (synthetic recent month)"
FLAVOR = "h100-mig"
PROFILES = ("1g.10gb", "3g.40gb")
# deployment: profile, replicas at night, in a working day's daytime, in a weekend's daytime
DEPLOYMENTS = {
    "chat-small": ("1g.10gb", 7, 14, 10),
    "chat-large": ("3g.40gb", 2, 4, 2),
    "embed": ("1g.10gb", 3, 3, 3),
}
GUARANTEE, BURST = 5, 2
"""inference's GPU-equivalents on h100-mig: its busiest hour (17 × 1/7 + 4 × 1/2 ≈ 4.43) fits the guarantee."""
ACTIVE = 0.45
"""Of the GPU-equivalents held, the share DCGM sees busy: serving waits for requests."""


def replicas(deployment: str, hour: datetime) -> int:
    """How many replicas of ``deployment`` run in ``hour`` (UTC)."""
    _, night, working, weekend = DEPLOYMENTS[deployment]
    if not 8 <= hour.hour < 20:
        return night
    return working if hour.weekday() < 5 else weekend


def load_inference_demo(now: datetime | None = None) -> bool:
    """Build it once; False when the inference team is there already."""
    if OrgUnit.objects.filter(path="acme/production/inference").exists():
        return False
    start, end = research_window(now)
    with transaction.atomic():
        flavor, team = _tree()
        records, allocations = _runs(flavor, team, start, end)
        hours = _hours(flavor, team, start, end)
        SourceRun.objects.create(
            source=SourceKind.REPLAY, cluster=flavor.cluster, name="inference-demo (synthetic)", status=SourceStatus.OK,
            started_at=end, finished_at=end, window_start=start, window_end=end, watermark=end,
            counts={"records": records, "allocations": allocations, "hours": hours},
            message="The demo's inference team on MIG slices: a reconstruction (accounting/demo_inference.py).",
        )  # fmt: skip
    usage_changed()
    return True


def _tree() -> tuple[ResourceFlavor, OrgUnit]:
    admin = demo_user("admin")
    cluster = Cluster.objects.get(name="k8s-west")
    flavor = services.flavor_set(
        actor=admin, reason=REASON, cluster=cluster, name=FLAVOR, accelerator_model="NVIDIA H100 80GB HBM3",
        device_memory_gb=80, interconnect="NVLink 900 GB/s", physical_devices=16, sharing="mig",
        mig_profiles=list(PROFILES), node_labels={"nvidia.com/mig.strategy": "mixed"}, price_per_device_hour="4.00",
    )  # fmt: skip
    production = OrgUnit.objects.get(path="acme/production")
    team = services.org_unit_create(
        actor=admin, reason=REASON, parent=production, kind="team", slug="inference", name="Inference",
        leads=[demo_user("lead-inference")],
    )  # fmt: skip
    levels = ((OrgUnit.objects.get(path="acme"), 16, 0), (production, 8, 0), (team, GUARANTEE, BURST))
    changes = [services.QuotaChange(u.pk, flavor.pk, Resource.GPU, g, b, 0) for u, g, b in levels]
    services.quota_set_bulk(actor=admin, reason=REASON, changes=changes)
    return flavor, team


def _spans(deployment: str, start: datetime, end: datetime) -> Iterator[tuple[int, datetime, datetime]]:
    """Each replica's runs: (replica, from, to) — replica r runs while the deployment has at least r."""
    most = max(DEPLOYMENTS[deployment][1:])
    began: dict[int, datetime] = {}
    hour = start
    while hour <= end:
        count = replicas(deployment, hour) if hour < end else 0
        for r in range(1, most + 1):
            if r <= count and r not in began:
                began[r] = hour
            elif r > count and r in began:
                yield r, began.pop(r), hour
        hour += timedelta(hours=1)


def _runs(flavor: ResourceFlavor, team: OrgUnit, start: datetime, end: datetime) -> tuple[int, int]:
    """One Kueue workload record and allocation per replica run, its slices weighed by the flavor's sharing."""
    sharing = flavor.sharing_spec
    records: list[WorkloadRecord] = []
    spans: list[tuple[datetime, datetime | None]] = []
    for deployment, (profile, *_) in DEPLOYMENTS.items():
        resource = f"nvidia.com/mig-{profile}"
        weighs = held({resource: 1}, sharing)
        for replica, begins, ends in _spans(deployment, start, end):
            running = ends >= end  # still up: its run is open
            spans.append((begins, None if running else ends))
            records.append(
                WorkloadRecord(
                    cluster=flavor.cluster, scheduler_id=f"demo-{deployment}-{replica}-{begins:%Y%m%d%H}",
                    job_id=f"inference/{deployment}-{replica}-{begins:%m%d%H}", unit=team, account="inference",
                    owner="lead-inference", project=deployment, tier="P1", flavor=flavor, flavor_name=flavor.name,
                    devices=1, equivalents=weighs, resources={resource: "1"}, submitted_at=begins, admitted_at=begins,
                    ended_at=None if running else ends, state="running" if running else "finished",
                    held_seconds=int((ends - begins).total_seconds()),
                )
            )  # fmt: skip
    WorkloadRecord.objects.bulk_create(records, batch_size=2000)  # their keys back (PostgreSQL, SQLite ≥ 3.35)
    allocations = [
        Allocation(
            record=r, unit=team, flavor=flavor, devices=1, equivalents=r.equivalents, borrowed=0, start=begins,
            end=ends, run_key="", raw_state="Finished" if ends else "", submitted_at=begins,
        )
        for r, (begins, ends) in zip(records, spans, strict=True)
    ]  # fmt: skip
    Allocation.objects.bulk_create(allocations, batch_size=2000)
    return len(records), len(allocations)


def _hours(flavor: ResourceFlavor, team: OrgUnit, start: datetime, end: datetime) -> int:
    """The hourly rollups of the runs: GPU-equivalent-hours held (all within the guarantee), busy at ACTIVE."""
    weights = {p.name: p.weight for p in flavor.sharing_spec.profiles}
    rows = []
    hour = start
    while hour < end:
        allocated = float(sum((replicas(d, hour) * weights[spec[0]] for d, spec in DEPLOYMENTS.items()), Fraction(0)))
        rows.append(
            UsageHour(
                unit=team, flavor=flavor, hour=hour, minutes=60, guarantee=GUARANTEE, allocated=allocated,
                within=min(allocated, GUARANTEE), borrowed=max(0.0, allocated - GUARANTEE), active=allocated * ACTIVE,
                productive=allocated * ACTIVE, productive_estimated=True,
                minutes_full=60 if allocated >= 0.9 * GUARANTEE else 0,
            )
        )  # fmt: skip
        hour += timedelta(hours=1)
    UsageHour.objects.bulk_create(rows, batch_size=5000)
    return len(rows)
