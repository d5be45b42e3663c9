"""Reads. Views, the API, tasks and services read through these; they return querysets or frozen
snapshots for the policy core, built with a handful of ``values()`` queries (no per-row ORM objects).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from quotas.models import (
    AuditEvent,
    Budget,
    BudgetSpend,
    CapacityReservation,
    Cluster,
    ClusterKind,
    NamespaceBinding,
    OrgUnit,
    Quota,
    ReclamationContract,
    ResourceFlavor,
    SubtreeCeilings,
    WorkloadTier,
)
from quotas.models.catalogue import SHARING_FIELDS, sharing_of
from quotas.policy import budgets as bud
from quotas.policy import snapshot as snap
from quotas.policy.kueue import KueueFlavor, KueueTarget
from quotas.policy.quantity import Resource
from quotas.policy.sharing import Profile


def subtree(field: str, path: str) -> Q:
    """Rows whose unit path ``field`` is ``path`` or below it (materialised paths)."""
    return Q(**{field: path}) | Q(**{f"{field}__startswith": f"{path}/"})


def active_units() -> QuerySet[OrgUnit]:
    return OrgUnit.objects.filter(archived_at__isnull=True)


def flavor_keys() -> dict[int, str]:
    """Flavor id → ``"<cluster>/<flavor>"``."""
    return {
        row["id"]: f"{row['cluster__name']}/{row['name']}"
        for row in ResourceFlavor.objects.values("id", "name", "cluster__name")
    }


def org_snapshot(*, include_quotas: bool = True) -> snap.OrgSnapshot:
    """The whole active tree as a frozen snapshot (6 queries, whatever its size)."""
    quotas = Quota.objects.filter(unit__archived_at__isnull=True) if include_quotas else Quota.objects.none()
    whole = _snapshot(active_units(), quotas, complete=True)
    budgets, spends = budget_maps(keys=None)
    return replace(whole, budgets=MappingProxyType(budgets), budget_spend=MappingProxyType(spends))


BUDGET_FIELDS = (
    "period", "device_hours", "action", "tiers", "warn_percent", "carry_over_cap", "oversubscription", "starts_on",
)  # fmt: skip
"""A budget's own fields, as the model and its services name them."""


def budget_core(unit_id: int, flavor: str, values: Mapping[str, Any]) -> bud.Budget:
    """The core's budget from a row's fields (:data:`BUDGET_FIELDS`: a ``values()`` row, or a model's
    fields as a service parsed them)."""
    return bud.Budget(
        unit_id,
        flavor,
        values["device_hours"],
        bud.Period(values["period"]),
        bud.BudgetAction(values["action"]),
        tuple(sorted(values["tiers"])),
        values["warn_percent"],
        values["carry_over_cap"],
        float(values["oversubscription"]),
        values["starts_on"],
    )


def budget_maps(
    *, keys: dict[int, str] | None = None, units: Iterable[int] | None = None
) -> tuple[dict[bud.BudgetKey, bud.Budget], dict[bud.BudgetKey, bud.BudgetSpend]]:
    """Budgets of active units (of ``units`` when given) and each one's newest evaluated period (2 queries)."""
    keys = keys if keys is not None else flavor_keys()
    rows = Budget.objects.filter(unit__archived_at__isnull=True)
    if units is not None:
        rows = rows.filter(unit_id__in=list(units))
    budgets: dict[bud.BudgetKey, bud.Budget] = {}
    ids: dict[int, bud.BudgetKey] = {}
    for row in rows.values("id", "unit_id", "flavor_id", *BUDGET_FIELDS):
        key = (row["unit_id"], keys[row["flavor_id"]])
        ids[row["id"]] = key
        budgets[key] = budget_core(row["unit_id"], key[1], row)
    spends: dict[bud.BudgetKey, bud.BudgetSpend] = {}
    for spend in (
        BudgetSpend.objects.filter(budget_id__in=list(ids))
        .order_by("budget_id", "-period_start")
        .values("budget_id", "period_start", "allowance", "spent", "by_unit", "exhausted_at")
    ):
        key = ids[spend["budget_id"]]
        if key not in spends:
            spends[key] = bud.BudgetSpend(
                spend["period_start"],
                spend["allowance"],
                spend["spent"],
                MappingProxyType({int(u): (v[0], v[1]) for u, v in spend["by_unit"].items()}),
                spend["exhausted_at"],
            )
    return budgets, spends


def roots_snapshot() -> snap.OrgSnapshot:
    """The top-level units with their quotas: what capacity checks read."""
    roots = list(active_units().filter(parent__isnull=True).values_list("id", flat=True))
    return neighbourhood_snapshot(roots)


def neighbourhood_snapshot(unit_ids: Iterable[int]) -> snap.OrgSnapshot:
    """The units, their parents, siblings and children (and every root when a root is among them):
    all that the invariants of an edit on ``unit_ids`` read. Call it after locking those units."""
    ids = set(unit_ids)
    rows = list(active_units().filter(id__in=ids).values("id", "parent_id"))
    parents = {row["parent_id"] for row in rows if row["parent_id"] is not None}
    scope = Q(id__in=ids) | Q(id__in=parents) | Q(parent_id__in=parents | ids)
    if any(row["parent_id"] is None for row in rows):
        scope |= Q(parent__isnull=True)
    units = active_units().filter(scope)
    return _snapshot(units, Quota.objects.filter(unit__in=units.values("id")), complete=False)


def _snapshot(units: QuerySet[OrgUnit], quotas: QuerySet[Quota], *, complete: bool) -> snap.OrgSnapshot:
    keys = flavor_keys()
    contract_names = dict(ReclamationContract.objects.values_list("id", "name"))
    unit_map = {
        row["id"]: snap.Unit(
            row["id"],
            row["slug"],
            snap.UnitKind(row["kind"]),
            row["parent_id"],
            row["path"],
            float(row["weight"]),
            contract_names.get(row["contract_id"]),
            row["kueue_name"] or None,
            row["cost_centre"] or None,
        )
        for row in units.values(
            "id", "slug", "kind", "parent_id", "path", "weight", "contract_id", "kueue_name", "cost_centre"
        )
    }
    quota_map = {
        (row["unit_id"], keys[row["flavor_id"]], Resource(row["resource"])): snap.Quota(
            row["guarantee"], row["burst"], row["lendable"]
        )
        for row in quotas.values("unit_id", "flavor_id", "resource", "guarantee", "burst", "lendable")
    }
    return snap.OrgSnapshot(
        units=MappingProxyType(unit_map),
        quotas=MappingProxyType(quota_map),
        flavors=MappingProxyType(_flavors(keys)),
        reservations=tuple(
            snap.Reservation(keys[row["flavor_id"]], row["name"], row["devices"])
            for row in CapacityReservation.objects.values("flavor_id", "name", "devices")
        ),
        contracts=MappingProxyType(_contracts()),
        tiers=MappingProxyType(_tiers()),
        scheduling_pass_s=settings.ALLOT_POLICY_SCHEDULING_PASS_SECONDS,
        complete=complete,
    )


def _flavors(keys: dict[int, str]) -> dict[str, snap.Flavor]:
    result = {}
    for row in ResourceFlavor.objects.values(
        "id",
        "physical_devices",
        "headroom_devices",
        "cpu_capacity",
        "memory_capacity",
        "cluster__kind",
        *SHARING_FIELDS,
    ):
        capacity = {}
        if row["cpu_capacity"] is not None:
            capacity[Resource.CPU] = row["cpu_capacity"]
        if row["memory_capacity"] is not None:
            capacity[Resource.MEMORY] = row["memory_capacity"]
        key = keys[row["id"]]
        result[key] = snap.Flavor(
            key,
            row["physical_devices"],
            row["headroom_devices"],
            MappingProxyType(capacity),
            lends_idle_guarantees=row["cluster__kind"] == ClusterKind.SLURM,
            sharing=sharing_of(row),
        )
    return result


def shared_profiles(cluster: Cluster) -> tuple[Profile, ...]:
    """The slice resources of a cluster's shared flavors (its Kueue configuration's transformations)."""
    rows = ResourceFlavor.objects.filter(cluster=cluster).exclude(sharing="whole").order_by("name")
    return tuple(p for row in rows.values(*SHARING_FIELDS) for p in sharing_of(row).profiles)


def _contracts() -> dict[str, snap.Contract]:
    return {
        row["name"]: snap.Contract(
            row["name"],
            row["reclaim_within"],
            row["grace_period"],
            row["min_run_window"],
            row["checkpoint_every"],
            row["measured_exit"],
            row["reclaim_within_cohort"],
            row["within_cluster_queue"],
        )
        for row in ReclamationContract.objects.values(
            "name",
            "reclaim_within",
            "grace_period",
            "min_run_window",
            "checkpoint_every",
            "measured_exit",
            "reclaim_within_cohort",
            "within_cluster_queue",
        )
    }


def _tiers() -> dict[str, snap.Tier]:
    return {
        row["name"]: snap.Tier(
            row["name"],
            row["priority"],
            row["preemptible"],
            row["max_runtime"],
            row["opportunistic"],
            row["display_name"],
        )
        for row in WorkloadTier.objects.values(
            "name", "priority", "preemptible", "max_runtime", "opportunistic", "display_name"
        )
    }


def policy_revision() -> int:
    """A number that grows with every audited change: the id of the newest audit event."""
    newest = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()
    return newest or 0


def kueue_target(cluster: Cluster) -> KueueTarget:
    """A Kubernetes cluster's flavors and the namespaces bound to active units on it."""
    flavors = tuple(
        KueueFlavor(
            key=f"{cluster.name}/{row['name']}",
            name=row["name"],
            node_labels=row["node_labels"] or {},
            tolerations=tuple(row["tolerations"] or ()),
            billing_weight=float(row["billing_weight"]),
            order=row["queue_order"],
            sharing=sharing_of(row),
        )
        for row in ResourceFlavor.objects.filter(cluster=cluster).values(
            "name", "node_labels", "tolerations", "billing_weight", "queue_order", *SHARING_FIELDS
        )
    )
    namespaces: dict[int, list[str]] = {}
    local_queues: dict[str, str] = {}
    for unit_id, namespace, local_queue in NamespaceBinding.objects.filter(
        cluster=cluster, unit__archived_at__isnull=True
    ).values_list("unit_id", "namespace", "local_queue_name"):
        namespaces.setdefault(unit_id, []).append(namespace)
        if local_queue:
            local_queues[namespace] = local_queue
    return KueueTarget(
        cluster=cluster.name,
        flavors=flavors,
        namespaces={unit: tuple(sorted(found)) for unit, found in namespaces.items()},
        local_queue_names=local_queues,
        revision=policy_revision(),
        at=timezone.now(),
        sharing=cluster.kueue_sharing,
        half_life_s=cluster.fairshare_half_life,
    )


def allocations() -> dict[tuple[int, str, str], int]:
    """(unit id, flavor key, resource) → what Kueue last reported its queue holds (one query)."""
    from quotas.models import QueueUsage

    return {
        (row["unit_id"], f"{row['cluster__name']}/{row['flavor']}", row["resource"]): row["total"]
        for row in QueueUsage.objects.filter(unit__isnull=False).values(
            "unit_id", "cluster__name", "flavor", "resource", "total"
        )
    }


def slurm_target(cluster: Cluster) -> Any:
    """A Slurm cluster's flavors (gres type = flavor name; a MIG flavor's profiles ``<name>_<profile>``),
    account names and members."""
    from quotas.models import Membership
    from quotas.policy.slurm.translate import SlurmFlavor, SlurmTarget, slurm_cluster_name

    flavors = tuple(
        SlurmFlavor(
            f"{cluster.name}/{row['name']}",
            row["name"],
            float(row["billing_weight"]),
            tuple((p.name, p.weight) for p in sharing_of(row).profiles),
        )
        for row in ResourceFlavor.objects.filter(cluster=cluster).values("billing_weight", *SHARING_FIELDS, "name")
    )
    accounts = dict(active_units().exclude(slurm_account="").values_list("id", "slurm_account"))
    members: dict[int, list[str]] = {}
    here = Membership.objects.exclude(slurm_username="").filter(
        Q(slurm_cluster__isnull=True) | Q(slurm_cluster=cluster)
    )
    for unit_id, username in here.values_list("unit_id", "slurm_username").distinct():
        members.setdefault(unit_id, []).append(username)
    return SlurmTarget(
        slurm_cluster_name(cluster.connection_ref),
        flavors,
        accounts,
        {u: tuple(sorted(m)) for u, m in members.items()},
        strict=cluster.subtree_ceilings != SubtreeCeilings.PERMISSIVE,
        qos_prefix=cluster.slurm_qos_prefix,
        at=timezone.now(),
    )


def slurm_desired(cluster: Cluster) -> Any:
    """What Allot wants on a Slurm cluster now: its :class:`SlurmState` (raises ValueError for a
    connection_ref that is not ``slurm:<name>``)."""
    from quotas.policy.slurm.translate import compile_slurm

    return compile_slurm(org_snapshot(), slurm_target(cluster))


def units_by_queue_name(names: Iterable[str]) -> dict[str, int]:
    """Kueue ClusterQueue (or Cohort) name → the active unit it is: its adopted name, or its path with dots
    (one query)."""
    names = set(names)
    if not names:
        return {}
    paths = {name.replace(".", "/") for name in names}
    found: dict[str, int] = {}
    rows = active_units().filter(Q(kueue_name__in=names) | Q(path__in=paths))
    for uid, path, kueue in rows.values_list("id", "path", "kueue_name"):
        found[kueue or path.replace("/", ".")] = uid
    return found


def fleet_targets(cluster: Cluster) -> tuple[Any, KueueTarget, dict[str, KueueTarget]] | None:
    """The fleet ``cluster`` manages or works for: its spec (quotas.policy.kueue.multikueue.Fleet), the
    manager's target and each worker's; None when it is in no fleet."""
    from quotas.models import Fleet, FleetWorker
    from quotas.policy.kueue.multikueue import Fleet as FleetSpec
    from quotas.policy.kueue.multikueue import Worker

    fleet = Fleet.objects.filter(manager=cluster).first()
    if fleet is None:
        member = FleetWorker.objects.filter(cluster=cluster).select_related("fleet").first()
        fleet = member.fleet if member else None
    if fleet is None:
        return None
    rows = list(fleet.workers.select_related("cluster"))
    spec = FleetSpec(
        fleet.name,
        fleet.manager.name,
        tuple(Worker(w.cluster.name, w.kubeconfig_secret) for w in rows),
        fleet.quota_automation,
    )
    return spec, kueue_target(fleet.manager), {w.cluster.name: kueue_target(w.cluster) for w in rows}
