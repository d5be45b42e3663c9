"""One organisation tree over a MultiKueue fleet: a manager cluster and its worker clusters. Pure.

Users submit to the manager; its ClusterQueues carry the MultiKueue AdmissionCheck, and Kueue's
MultiKueue controller copies each Workload that reserved quota there to the workers listed in the
MultiKueueConfig, which admit and run it (concepts_multikueue in Kueue's documentation). So:

* **the manager** gets the tree's Cohorts, ClusterQueues, LocalQueues and priority classes as a cluster
  would, with each unit's quota per flavor *summed over the workers* (a100 on worker-a and on worker-b is
  one a100 pool on the manager) — unless Kueue's manager quota automation fills them
  (``quotaManagement: Automated``), then without quota; every ClusterQueue lists the fleet's AdmissionCheck
  (``admissionChecksStrategy``). Beside them: the ``AdmissionCheck`` (controller
  ``kueue.x-k8s.io/multikueue``), one ``MultiKueueConfig`` listing the workers in the operator's order (at
  most 20: Kueue's incremental dispatcher nominates them in that order) and one ``MultiKueueCluster``
  per worker, pointing at the kubeconfig Secret the operator provides (Allot never holds credentials);
* **each worker** gets its own objects as a standalone cluster (its flavors, the tree's quota on them),
  with the manager's namespaces and LocalQueue names: MultiKueue creates the copied Workload in the same
  namespace and queue on the worker, so both must exist there.

The manager is never one of its own workers (Kueue does not support it), and a worker is listed once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from ..snapshot import OrgSnapshot, Quota
from .target import API_VERSION, CompileError, KueueFlavor, KueueTarget, Object
from .translate import compile_kueue

CONTROLLER = "kueue.x-k8s.io/multikueue"
MAX_WORKERS = 20
"""A MultiKueueConfig lists at most 20 clusters (its CRD's maxItems)."""
FLEET_KINDS = ("MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck")
"""Applied after the ResourceFlavors and before the queues that name them."""


@dataclass(frozen=True)
class Worker:
    cluster: str
    kubeconfig_secret: str
    """A Secret in Kueue's namespace on the manager holding the worker's kubeconfig (key ``kubeconfig``)."""


@dataclass(frozen=True)
class Fleet:
    name: str
    manager: str
    workers: tuple[Worker, ...]
    quota_automation: bool = False
    """Kueue's MultiKueueManagerQuotaAutomation fills the manager's quotas (MultiKueueConfig quotaManagement)."""

    @property
    def check_name(self) -> str:
        return f"allot-multikueue-{self.name}"


def fleet_problems(fleet: Fleet) -> list[str]:
    problems = []
    names = [w.cluster for w in fleet.workers]
    if not names:
        problems.append(f"fleet {fleet.name}: give it at least one worker cluster")
    if len(names) > MAX_WORKERS:
        problems.append(
            f"fleet {fleet.name}: {len(names)} workers, but a MultiKueueConfig lists at most {MAX_WORKERS}: "
            "split it into two fleets"
        )
    if fleet.manager in names:
        problems.append(f"fleet {fleet.name}: {fleet.manager} cannot be a worker of itself (Kueue does not support it)")
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        problems.append(f"fleet {fleet.name}: {', '.join(doubled)} listed more than once")
    if any(not w.kubeconfig_secret for w in fleet.workers):
        problems.append(f"fleet {fleet.name}: each worker needs the name of its kubeconfig Secret on the manager")
    return problems


def manager_snapshot(snapshot: OrgSnapshot, fleet: Fleet, flavor_names: Mapping[str, str]) -> OrgSnapshot:
    """The tree with each quota on a worker's flavor moved to the manager's flavor of the same name, and
    summed over the workers (``flavor_names``: worker flavor key → its name)."""
    workers = {w.cluster for w in fleet.workers}
    summed: dict[tuple[int, str, Any], Quota] = {}
    for (uid, key, resource), q in snapshot.quotas.items():
        cluster = key.split("/", 1)[0]
        if cluster not in workers or key not in flavor_names:
            continue
        target = (uid, f"{fleet.manager}/{flavor_names[key]}", resource)
        have = summed.get(target, Quota())
        summed[target] = Quota(have.guarantee + q.guarantee, have.burst + q.burst, have.lendable + q.lendable)
    # a GPU-hour budget on a worker's flavor governs the manager's flavor of that name (what is submitted to
    # the manager may run there); where two workers' budgets share a name, the more spent one holds
    budgets: dict[tuple[int, str], Any] = {}
    spend: dict[tuple[int, str], Any] = {}
    for (uid, key), budget in snapshot.budgets.items():
        if key.split("/", 1)[0] not in workers or key not in flavor_names:
            continue
        moved = (uid, f"{fleet.manager}/{flavor_names[key]}")
        used = snapshot.budget_spend.get((uid, key))
        held = spend.get(moved)
        if moved in budgets and (used is None or (held is not None and _share(held) >= _share(used))):
            continue
        budgets[moved] = replace(budget, flavor=moved[1])
        if used is not None:
            spend[moved] = used
    return replace(
        snapshot,
        quotas=MappingProxyType(summed),
        budgets=MappingProxyType(budgets),
        budget_spend=MappingProxyType(spend),
    )


def _share(spend: Any) -> float:
    return float(spend.spent) / float(spend.allowance) if spend.allowance else float("inf")


def manager_flavors(fleet: Fleet, workers: Mapping[str, KueueTarget]) -> tuple[KueueFlavor, ...]:
    """One manager flavor per flavor name on any worker, in the first worker's order (no node labels: no
    pod runs on the manager)."""
    seen: dict[str, KueueFlavor] = {}
    for worker in fleet.workers:
        for f in workers[worker.cluster].flavors:
            manager = KueueFlavor(
                f"{fleet.manager}/{f.name}", f.name, billing_weight=f.billing_weight, order=f.order, sharing=f.sharing
            )
            seen.setdefault(f.name, manager)  # a shared flavor stays shared: its quota in the same currency
    return tuple(seen.values())


def compile_fleet(
    snapshot: OrgSnapshot, fleet: Fleet, manager: KueueTarget, workers: Mapping[str, KueueTarget]
) -> dict[str, list[Object]]:
    """Every object of every cluster of the fleet: cluster name → its objects, in apply order.
    ``manager`` brings the manager's namespace bindings (where users submit); ``workers`` each worker's
    flavors."""
    problems = fleet_problems(fleet)
    if problems:
        raise CompileError("; ".join(problems))
    missing = [w.cluster for w in fleet.workers if w.cluster not in workers]
    if missing:
        raise CompileError(f"fleet {fleet.name}: no cluster named {', '.join(missing)}")
    names = {f.key: f.name for w in fleet.workers for f in workers[w.cluster].flavors}
    target = replace(manager, flavors=manager_flavors(fleet, workers))
    hub = compile_kueue(manager_snapshot(snapshot, fleet, names), target)
    for obj in hub:
        if obj["kind"] == "ClusterQueue":
            obj["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": fleet.check_name}]}
        if fleet.quota_automation and obj["kind"] in ("ClusterQueue", "Cohort"):
            obj["spec"].pop("resourceGroups", None)  # Kueue's manager quota automation owns them
    out = {fleet.manager: _with_fleet_objects(hub, fleet, manager)}
    for worker in fleet.workers:
        own = replace(
            workers[worker.cluster], namespaces=manager.namespaces, local_queue_names=manager.local_queue_names
        )
        out[worker.cluster] = compile_kueue(snapshot, own)
    return out


def _meta(name: str, target: KueueTarget, fleet: Fleet) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "allot", "allot.dev/cluster": target.cluster},
        "annotations": {"allot.dev/policy-revision": str(target.revision), "allot.dev/fleet": fleet.name},
    }


def _with_fleet_objects(hub: Sequence[Object], fleet: Fleet, target: KueueTarget) -> list[Object]:
    clusters = [
        {
            "apiVersion": API_VERSION,
            "kind": "MultiKueueCluster",
            "metadata": _meta(w.cluster, target, fleet),
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": w.kubeconfig_secret}}},
        }
        for w in fleet.workers
    ]
    config = {
        "apiVersion": API_VERSION,
        "kind": "MultiKueueConfig",
        "metadata": _meta(fleet.name, target, fleet),
        "spec": {
            "clusters": [w.cluster for w in fleet.workers],
            "quotaManagement": "Automated" if fleet.quota_automation else "Manual",
        },
    }
    check = {
        "apiVersion": API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": _meta(fleet.check_name, target, fleet),
        "spec": {
            "controllerName": CONTROLLER,
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": fleet.name},
        },
    }
    flavors = [o for o in hub if o["kind"] == "ResourceFlavor"]
    rest = [o for o in hub if o["kind"] != "ResourceFlavor"]
    return [*flavors, *clusters, config, check, *rest]


def read_fleets(objects: Sequence[Mapping[str, Any]], manager: str) -> tuple[list[Fleet], list[str]]:
    """The fleets a manager's MultiKueueConfigs describe, with each worker's kubeconfig Secret from its
    MultiKueueCluster (an import); notes for what cannot be carried over (a worker named by a
    ClusterProfile, or without its MultiKueueCluster)."""
    sources = {
        str(o["metadata"]["name"]): ((o.get("spec") or {}).get("clusterSource") or {})
        for o in objects
        if o.get("kind") == "MultiKueueCluster"
    }
    fleets, notes = [], []
    for config in (o for o in objects if o.get("kind") == "MultiKueueConfig"):
        name = str(config["metadata"]["name"])
        spec = config.get("spec") or {}
        workers = []
        for cluster in spec.get("clusters") or ():
            kubeconfig = (sources.get(cluster) or {}).get("kubeConfig") or {}
            if kubeconfig.get("locationType", "Secret") != "Secret" or not kubeconfig.get("location"):
                notes.append(
                    f"{name}: worker {cluster} has no kubeconfig Secret (a path or a ClusterProfile, or no "
                    "MultiKueueCluster): give it one when you set the fleet up"
                )
                continue
            workers.append(Worker(str(cluster), str(kubeconfig["location"])))
        fleets.append(Fleet(name, manager, tuple(workers), spec.get("quotaManagement") == "Automated"))
    return fleets, notes
