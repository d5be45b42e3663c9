"""A realistic demo organisation, built only through the services (so it is validated and audited).

One organisation, 3 departments, 10 teams and their projects; a Kubernetes/Kueue cluster with the
seed's table-8 inventory (A100-80GB ×400, A100-40GB ×424, V100-32GB ×200) plus H100s, and a Slurm
cluster with H100s. Guarantees are fractions of reclaimable capacity, so every invariant holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.db import transaction

from quotas import services
from quotas.models import ClusterKind, OrgUnit, ReclamationContract, ResourceFlavor
from quotas.policy.quantity import Resource

DEMO_PASSWORD = "allot-demo"
REASON = "demo organisation"
CPU_PER_GPU = 12_000  # millicores
MEM_PER_GPU = 128 * 2**30  # bytes


@dataclass(frozen=True)
class _FlavorSpec:
    cluster: str
    name: str
    model: str
    memory_gb: int
    interconnect: str
    devices: int
    headroom: int
    billing_weight: str
    price: str


FLAVORS = [
    _FlavorSpec("k8s-west", "a100-80gb", "NVIDIA A100-SXM4-80GB", 80, "NVLink 600 GB/s", 400, 16, "1.0", "2.00"),
    _FlavorSpec("k8s-west", "a100-40gb", "NVIDIA A100-SXM4-40GB", 40, "NVLink 600 GB/s", 424, 16, "0.7", "1.40"),
    _FlavorSpec("k8s-west", "v100-32gb", "NVIDIA V100-PCIE-32GB", 32, "PCIe Gen3 15.8 GB/s", 200, 8, "0.3", "0.60"),
    _FlavorSpec("k8s-west", "h100-80gb", "NVIDIA H100-SXM5-80GB", 80, "NVLink 900 GB/s", 128, 8, "2.0", "4.00"),
    _FlavorSpec("slurm-lab", "h100", "NVIDIA H100-SXM5-80GB", 80, "NVLink 900 GB/s", 64, 4, "2.0", "4.00"),
]
RESERVATIONS = [("k8s-west", "a100-80gb", "serving-failover", 24), ("k8s-west", "a100-40gb", "conference-demo", 8)]

# (slug, kind, share of the parent's guarantee, fair-share weight, contract, lendable share, lead)
TREE: list[tuple[str, str, float, int, str | None, float, str | None]] = [
    ("research", "department", 0.50, 40, "research-relaxed", 1.0, "head-research"),
    ("research/nlp", "team", 0.45, 3, None, 0.5, "lead-nlp"),
    ("research/nlp/llm-pretrain", "project", 0.60, 2, None, 0.5, None),
    ("research/nlp/llm-eval", "project", 0.30, 1, None, 0.5, None),
    ("research/vision", "team", 0.30, 2, None, 0.5, "lead-vision"),
    ("research/vision/detection", "project", 0.50, 1, None, 0.5, None),
    ("research/vision/segmentation", "project", 0.40, 1, None, 0.5, None),
    ("research/speech", "team", 0.10, 1, None, 0.5, "lead-speech"),
    ("research/rl", "team", 0.10, 1, None, 0.5, "lead-rl"),
    ("production", "department", 0.33, 40, "standard", 1.0, "head-production"),
    ("production/serving", "team", 0.55, 3, "serving-strict", 0.0, "lead-serving"),
    ("production/serving/chat-api", "project", 0.80, 1, None, 0.0, None),
    ("production/ranking", "team", 0.25, 2, None, 0.5, "lead-ranking"),
    ("production/recsys", "team", 0.15, 1, None, 0.5, "lead-recsys"),
    ("platform", "department", 0.15, 20, "standard", 1.0, "head-platform"),
    ("platform/infra", "team", 0.40, 2, None, 0.5, "lead-infra"),
    ("platform/data-eng", "team", 0.30, 1, None, 0.5, "lead-data-eng"),
    ("platform/safety", "team", 0.25, 1, None, 0.5, "lead-safety"),
]
COST_CENTRES = {"acme": "CC-1000", "research": "CC-1100", "production": "CC-1200", "platform": "CC-1300"}
"""Finance cost centres (teams inherit their department's): stamped on the Kueue objects for Kueue's metrics."""
BURST = {"organisation": 0.0, "department": 0.25, "team": 0.5, "project": 0.5}
SLURM_USERS = {
    "research/nlp": ["alice", "dave"],
    "research/vision": ["bob"],
    "production/serving": ["carol"],
    "research/rl": ["erin"],
    "platform/infra": ["frank"],
}


def demo_users() -> list[str]:
    """Every demo login there is: admin and viewer first, then the leads — the organisation's and those
    the usage demos add (head-earth and Earth's leads, head-fleet-lab) once loaded."""
    made = set(get_user_model().objects.filter(email__endswith="@example.org").values_list("username", flat=True))
    first = [name for name in ("admin", "viewer") if name in made]
    return first + sorted(made - set(first))


def demo_user(username: str) -> User:
    """The demo user ``username`` (password DEMO_PASSWORD), created once."""
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(
        username=username,
        defaults={
            "email": f"{username}@example.org",
            "is_staff": username == "admin",
            "is_superuser": username == "admin",
        },
    )
    if created:
        user.password = _demo_password_hash()
        user.save()
    return user


@lru_cache(maxsize=1)
def _demo_password_hash() -> str:
    """Hashed once: every demo user shares the password, and each hash costs a fifth of a second."""
    return make_password(DEMO_PASSWORD)


@transaction.atomic
def load_demo() -> bool:
    """Load the demo organisation unless it exists. Returns True when it was loaded now."""
    if OrgUnit.objects.filter(path="acme").exists():
        return False
    admin = demo_user("admin")
    demo_user("viewer")
    _catalogue(admin)
    flavors = list(ResourceFlavor.objects.select_related("cluster"))
    org = services.org_unit_create(
        actor=admin,
        reason=REASON,
        parent=None,
        kind="organisation",
        slug="acme",
        name="Acme AI",
        contract=None,
        cost_centre=COST_CENTRES["acme"],
    )
    services.org_unit_update(actor=admin, reason=REASON, unit=org, contract=_contract("standard"))
    guarantees = {"acme": {f.key: f.physical_devices - f.headroom_devices - _reserved(f) for f in flavors}}
    top = _changes(org, flavors, guarantees["acme"], 0.0, 1.0)
    for i, change in enumerate(top):
        flavor = next(f for f in flavors if f.pk == change.flavor_id)
        if flavor.cluster.kind == ClusterKind.SLURM:
            # Slurm's QOS do not nest: with strict subtree ceilings a top-level burst of 0 would leave no
            # team anything to borrow, so acme may borrow up to the partition's every GPU (headroom included)
            top[i] = dataclasses.replace(change, burst=flavor.physical_devices - (change.guarantee or 0))
    services.quota_set_bulk(actor=admin, reason=REASON, changes=top)
    units = {"acme": org}
    for path, kind, share, weight, contract, lend, lead in TREE:
        parent_path, _, slug = f"acme/{path}".rpartition("/")
        parent = units[parent_path]
        unit = services.org_unit_create(
            actor=admin,
            reason=REASON,
            parent=parent,
            kind=kind,
            slug=slug,
            name=slug.replace("-", " ").title(),
            weight=weight,
            contract=_contract(contract) if contract else None,
            slurm_account=slug,
            leads=[demo_user(lead)] if lead else [],
            cost_centre=COST_CENTRES.get(path, ""),
        )
        units[unit.path] = unit
        guarantees[unit.path] = {k: int(g * share) for k, g in guarantees[parent_path].items()}
        services.quota_set_bulk(
            actor=admin, reason=REASON, changes=_changes(unit, flavors, guarantees[unit.path], BURST[kind], lend)
        )
    _bindings(admin, units)
    return True


def _reserved(flavor: ResourceFlavor) -> int:
    return sum(r.devices for r in flavor.reservations.all())


def _contract(name: str) -> ReclamationContract:
    return ReclamationContract.objects.get(name=name)


def _changes(
    unit: OrgUnit, flavors: list[ResourceFlavor], guarantees: dict[str, int], burst: float, lend: float
) -> list[services.QuotaChange]:
    changes = []
    for flavor in flavors:
        g = guarantees[flavor.key]
        b, lent = int(g * burst), int(g * lend)
        changes.append(services.QuotaChange(unit.pk, flavor.pk, Resource.GPU, g, b, lent))
        if flavor.cluster.kind == ClusterKind.KUBERNETES:
            changes.append(
                services.QuotaChange(
                    unit.pk, flavor.pk, Resource.CPU, g * CPU_PER_GPU, b * CPU_PER_GPU, lent * CPU_PER_GPU
                )
            )
            changes.append(
                services.QuotaChange(
                    unit.pk, flavor.pk, Resource.MEMORY, g * MEM_PER_GPU, b * MEM_PER_GPU, lent * MEM_PER_GPU
                )
            )
    return changes


def _catalogue(admin: User) -> None:
    clusters = {
        "k8s-west": services.cluster_set(
            actor=admin,
            reason=REASON,
            name="k8s-west",
            kind=ClusterKind.KUBERNETES,
            display_name="Kubernetes West",
            connection_ref="demo:k8s-west",
            description=(
                "GPU training fleet — simulated for the demo (no API server: its Kueue objects are kept in "
                "ALLOT_VAR_DIR/demo-clusters/); point connection_ref at a kubeconfig for a real one"
            ),
        ),
        "slurm-lab": services.cluster_set(
            actor=admin,
            reason=REASON,
            name="slurm-lab",
            kind=ClusterKind.SLURM,
            display_name="Slurm Lab",
            connection_ref="slurm:lab",
            description="HPC partition with H100 nodes",
        ),
    }
    for spec in FLAVORS:
        services.flavor_set(
            actor=admin,
            reason=REASON,
            cluster=clusters[spec.cluster],
            name=spec.name,
            accelerator_model=spec.model,
            device_memory_gb=spec.memory_gb,
            interconnect=spec.interconnect,
            physical_devices=spec.devices,
            headroom_devices=spec.headroom,
            billing_weight=spec.billing_weight,
            price_per_device_hour=spec.price,
            node_labels={"allot.dev/flavor": spec.name},
            cpu_capacity=spec.devices * CPU_PER_GPU if spec.cluster == "k8s-west" else None,
            memory_capacity=spec.devices * MEM_PER_GPU if spec.cluster == "k8s-west" else None,
        )
    for cluster, flavor, name, devices in RESERVATIONS:
        services.reservation_set(
            actor=admin,
            reason=REASON,
            flavor=ResourceFlavor.objects.get(cluster__name=cluster, name=flavor),
            name=name,
            devices=devices,
            description="non-preemptible capacity held back from guarantees",
        )
    for name, within, grace, window, every, exit_s, cohort in [
        ("standard", 900, 60, 120, 900, 60, "Any"),
        ("serving-strict", 300, 30, 0, 1800, 30, "Any"),
        # each promise holds for the worst-case borrower: what a borrower may keep of others' devices
        # (window + grace + exit + a pass: standard 4m10s, research 4m40s) fits serving's 5 minutes;
        # research's own promise is relaxed (an hour)
        ("research-relaxed", 3600, 120, 120, 1800, 30, "Any"),
    ]:
        services.contract_set(
            actor=admin,
            reason=REASON,
            name=name,
            reclaim_within=within,
            grace_period=grace,
            min_run_window=window,
            checkpoint_every=every,
            measured_exit=exit_s,
            reclaim_within_cohort=cohort,
        )
    for name, display, priority, preemptible, opportunistic, runtime in [
        ("P0", "Production serving", 100000, False, False, None),
        ("P1", "Production training", 10000, False, False, None),
        ("P2", "Interactive / debug", 1000, False, False, 4 * 3600),
        ("P3", "Batch / research", 100, True, True, None),
    ]:
        services.tier_set(
            actor=admin,
            reason=REASON,
            name=name,
            display_name=display,
            priority=priority,
            preemptible=preemptible,
            opportunistic=opportunistic,
            max_runtime=runtime,
        )


def _bindings(admin: User, units: dict[str, OrgUnit]) -> None:
    from quotas.models import Cluster

    k8s = Cluster.objects.get(name="k8s-west")
    for path, unit in units.items():
        if unit.kind in ("team", "project"):
            services.namespace_bind(actor=admin, reason=REASON, unit=unit, cluster=k8s, namespace=unit.slug)
        for username in SLURM_USERS.get(path.removeprefix("acme/"), []):
            services.membership_add(actor=admin, reason=REASON, unit=unit, slurm_username=username)


def demo_cluster_history() -> list[str]:
    """Give the demo's simulated Kubernetes cluster the history a real one has after a week: the first sync
    (every object created), a person's ``kubectl edit`` of one ClusterQueue's GPU quota, the nightly drift
    check that finds it and a dry run that shows the sync would be refused for that queue, with the way to
    correct it. Only where the cluster has no runs yet (a fresh demo); returns what it did, a line each."""
    from quotas.integrations import demo_cluster
    from quotas.models import Cluster, SyncMode
    from quotas.services.sync import cluster_sync

    cluster = Cluster.objects.get(name="k8s-west")
    if not demo_cluster.is_demo(cluster.connection_ref) or cluster.sync_runs.exists():
        return []
    admin, name = demo_user("admin"), cluster.connection_ref.removeprefix(demo_cluster.PREFIX)
    demo_cluster.reset(name)
    done = [cluster_sync(actor=admin, reason="demo: the cluster's first sync", cluster=cluster)]
    queue = next(q for q in demo_cluster.DemoKueueClient(cluster.connection_ref).list_managed("ClusterQueue")
                 if next(_gpu_quotas(q["spec"]), None) is not None)  # fmt: skip
    demo_cluster.person_edit(name, "ClusterQueue", queue["metadata"]["name"], _lower_gpu_quota)
    done.append(cluster_sync(actor=None, reason="nightly drift check", cluster=cluster, mode=SyncMode.DRIFT_CHECK))
    done.append(cluster_sync(actor=admin, reason="demo: what would a sync do now?", cluster=cluster,
                             mode=SyncMode.DRY_RUN))  # fmt: skip
    return [f"{run.get_mode_display()}: {run.status} — {run.message}" for run in done]


def _gpu_quotas(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A ClusterQueue spec's GPU resources with a nominal quota above 1 (one can lose a GPU), in order."""
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") == "nvidia.com/gpu" and int(resource.get("nominalQuota", 0)) > 1:
                    yield resource


def _lower_gpu_quota(spec: dict[str, Any]) -> str:
    """What a person's ``kubectl edit`` does in the demo: one GPU less on the queue's first GPU quota."""
    resource = next(_gpu_quotas(spec))
    resource["nominalQuota"] = int(resource["nominalQuota"]) - 1
    return ".spec.resourceGroups"
