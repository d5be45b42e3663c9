"""The demo's policy–infrastructure mismatch: the cluster of the domain background's Example 8.2 (Table 8's
inventory) through a month of synthetic rollups and memory measurements built to its Table 9
before-state — A100-80GB 95 % allocated and 72 % of that active with work waiting, A100-40GB 64 %
allocated, V100 idle — because job templates pin the A100-80GB pool: most of its work peaks at 35 GB
or far less.

Adds a Kubernetes cluster ``example-8-2`` (switched off: nothing to sync), its three flavors, a
department ``fleet-lab`` with five teams, and October 2026's hourly rows: every hour, per team and
pool, the devices held (``UsageHour``) and the workloads holding them with their peak device memory
(``MemoryHour``), which add up to the held devices. Idempotent. The numbers are a reconstruction of
the example, not a trace: the docs say so wherever they show.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction

from accounting.models import MemoryHour, UsageHour
from accounting.services.usage_version import usage_changed
from quotas import services
from quotas.demo import demo_user
from quotas.models import Cluster, ClusterKind, OrgUnit, ResourceFlavor
from quotas.policy import Resource

REASON = "demo: the cluster of Example 8.2 (domain background, section 8.12.2; synthetic month)"
MONTH = (datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC))
# name, model, memory GB, interconnect, GPUs, nodes (Table 8)
POOLS = [
    ("a100-80gb", "NVIDIA A100-SXM4-80GB", 80, "NVLink 600 GB/s", 400, 50),
    ("a100-40gb", "NVIDIA A100-SXM4-40GB", 40, "NVLink 600 GB/s", 424, 53),
    ("v100-32gb", "NVIDIA V100-PCIE-32GB", 32, "PCIe Gen3 15.8 GB/s", 200, 50),
]
# team: {pool: (guarantee, devices held every hour, 8-GPU workloads' peak GB)}; pools held add up to
# Table 9's before-state: 380 of 400 A100-80GB (95 %), 272 of 424 A100-40GB (64 %), 0 of 200 V100
TEAMS: dict[str, dict[str, tuple[int, int, float]]] = {
    "llm": {"a100-80gb": (120, 112, 71.0)},  # needs the 80 GB: fine where it is
    "research": {"a100-80gb": (100, 96, 35.0), "a100-40gb": (60, 48, 31.0)},  # copied 80 GB templates, 35 GB jobs
    "vision": {"a100-80gb": (80, 80, 22.0), "a100-40gb": (120, 112, 30.0), "v100-32gb": (60, 0, 0.0)},
    "speech": {"a100-80gb": (60, 56, 18.0), "a100-40gb": (100, 64, 24.0), "v100-32gb": (80, 0, 0.0)},
    "recsys": {"a100-80gb": (40, 36, 20.0), "a100-40gb": (80, 48, 26.0), "v100-32gb": (60, 0, 0.0)},
}
ACTIVE = 0.72
"""Of the A100-80GB devices held, the share DCGM saw active (Table 9: 72 %); the other pools: 0.9."""
WAITING = {"llm": 24.0, "research": 16.0, "vision": 16.0, "speech": 8.0}
"""Devices of A100-80GB work queued every hour (64: "over 50 pending jobs"), as gangs of 8 GPUs per node
(llm's 24 is one 3 × 8 gang): what the pool's fragmentation samples say waits."""


def load_fleet_demo() -> bool:
    """Build it once; False when it is there already."""
    if Cluster.objects.filter(name="example-8-2").exists():
        return False
    with transaction.atomic():
        flavors, teams = _tree()
        _month(flavors, teams)
        _nodes(flavors)
    return True


def _tree() -> tuple[dict[str, ResourceFlavor], dict[str, OrgUnit]]:
    admin = get_user_model().objects.get(username="admin")
    cluster = services.cluster_set(
        actor=admin, reason=REASON, name="example-8-2", kind=ClusterKind.KUBERNETES,
        display_name="Example 8.2 (synthetic)", description="a reconstruction of Example 8.2, not a trace",
        enabled=False,
    )  # fmt: skip
    flavors = {
        name: services.flavor_set(
            actor=admin, reason=REASON, cluster=cluster, name=name, accelerator_model=model, device_memory_gb=gb,
            interconnect=link, physical_devices=gpus, node_labels={"nvidia.com/gpu.product": model.replace(" ", "-")},
            price_per_device_hour="2.0000",
        )
        for name, model, gb, link, gpus, _ in POOLS
    }  # fmt: skip
    acme = OrgUnit.objects.get(path="acme")

    def gpus(unit: OrgUnit, pool: str, guarantee: int) -> services.QuotaChange:
        return services.QuotaChange(unit.pk, flavors[pool].pk, Resource.GPU, guarantee, 0, 0)

    totals = {pool: sum(t.get(pool, (0, 0, 0.0))[0] for t in TEAMS.values()) for pool in flavors}
    services.quota_set_bulk(actor=admin, reason=REASON, changes=[gpus(acme, p, g) for p, g in totals.items()])
    lab = services.org_unit_create(
        actor=admin, reason=REASON, parent=acme, kind="department", slug="fleet-lab", name="Fleet lab (Example 8.2)",
        leads=[demo_user("head-fleet-lab")],
    )  # fmt: skip
    services.quota_set_bulk(actor=admin, reason=REASON, changes=[gpus(lab, p, g) for p, g in totals.items()])
    teams = {
        slug: services.org_unit_create(actor=admin, reason=REASON, parent=lab, kind="team", slug=slug) for slug in TEAMS
    }
    services.quota_set_bulk(
        actor=admin,
        reason=REASON,
        changes=[gpus(teams[slug], pool, g) for slug, pools in TEAMS.items() for pool, (g, _, _) in pools.items()],
    )
    return flavors, teams


def _month(flavors: dict[str, ResourceFlavor], teams: dict[str, OrgUnit]) -> None:
    cluster = next(iter(flavors.values())).cluster
    usage, memory = [], []
    hours = int((MONTH[1] - MONTH[0]).total_seconds() // 3600)
    for h in range(hours):
        hour = MONTH[0] + timedelta(hours=h)
        for slug, pools in TEAMS.items():
            unit = teams[slug]
            for pool, (guarantee, held, peak) in pools.items():
                flavor = flavors[pool]
                within = min(held, guarantee)
                share = ACTIVE if pool == "a100-80gb" else 0.9
                waiting = WAITING.get(slug, 0.0) if pool == "a100-80gb" else 0.0
                usage.append(
                    UsageHour(
                        unit=unit, flavor=flavor, hour=hour, minutes=60, guarantee=guarantee, allocated=held,
                        within=within, borrowed=held - within, pending=waiting, active=held * share,
                        productive=held * share, productive_estimated=True, minutes_queued=60 if waiting else 0,
                    )
                )  # fmt: skip
                sizes = [8] * (held // 8) + ([held % 8] if held % 8 else [])  # 8-GPU workloads, a day long each
                for n, size in enumerate(sizes):
                    memory.append(
                        MemoryHour(
                            cluster=cluster, unit=unit, flavor=flavor, hour=hour, devices=size,
                            workload=f"{slug}/{pool}-{n}-{h // 24:02d}", peak_mib=(peak - (n % 3)) * 1024,
                        )
                    )  # fmt: skip
    UsageHour.objects.bulk_create(usage, batch_size=5000)
    usage_changed()
    MemoryHour.objects.bulk_create(memory, batch_size=5000)


def _nodes(flavors: dict[str, ResourceFlavor]) -> None:
    """Every hour, each pool's nodes as the month's workloads fill them (8-GPU workloads packed node by
    node, Table 8's node counts) and the gangs that wait, through the fragmentation index
    (accounting.policy.fragmentation): the sample the pool table and the fragmentation finding read."""
    from accounting.models import FragmentationSample
    from accounting.policy.fragmentation import NodeGpus, PendingShape, fragmentation

    samples = []
    for name, _, _, _, gpus, count in POOLS:
        per_node = gpus // count
        sizes = sorted(
            (s for pools in TEAMS.values() if name in pools
             for s in [8] * (pools[name][1] // 8) + ([pools[name][1] % 8] if pools[name][1] % 8 else [])),
            reverse=True,
        )  # fmt: skip
        used = [0] * count
        for size in sizes:  # first fit: where the scheduler put them
            node = next((i for i in range(count) if used[i] + size <= per_node), None)
            if node is not None:
                used[node] += size
        nodes = [NodeGpus(f"{name}-{i:02d}", name, per_node, used[i]) for i in range(count)]
        waiting = (
            [PendingShape(f"{slug}/train", name, 8, int(devices) // 8) for slug, devices in WAITING.items()]
            if name == "a100-80gb"
            else []
        )
        found = fragmentation(name, nodes, waiting)
        hours = int((MONTH[1] - MONTH[0]).total_seconds() // 3600)
        samples += [
            FragmentationSample(
                flavor=flavors[name], at=MONTH[0] + timedelta(hours=h), nodes=found.nodes, total=found.total,
                used=found.used, free=found.free, usable=found.usable, index=found.index,
                largest_block=found.largest_block, whole_free_nodes=found.whole_free_nodes,
                pending_gpus=found.pending_gpus, waiting=list(found.waiting),
                blocks={str(k): v for k, v in found.blocks.items()},
                placeable={str(k): v for k, v in found.placeable.items()},
            )
            for h in range(hours)
        ]  # fmt: skip
    FragmentationSample.objects.bulk_create(samples, batch_size=2000)


def fleet_demo_findings() -> dict[str, int]:
    """The month's mismatch findings (the over-specification and stranded-pool detectors over October),
    reconciled on their own so the demo's other findings stay as they are."""
    from accounting.policy.findings import FindingKind, Thresholds
    from accounting.services.finding_records import findings_reconcile
    from accounting.services.mismatch import mismatch_found

    start, end = MONTH
    found = mismatch_found(start, end, Thresholds())
    kinds = frozenset({FindingKind.OVER_SPECIFIED, FindingKind.STRANDED_POOL})
    return findings_reconcile(found, end, end, kinds).found
