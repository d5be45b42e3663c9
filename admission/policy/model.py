"""The admission policy of one Kubernetes cluster, compiled for lookups in memory.

Built from the same snapshot the Kueue translator reads, so the webhook asks exactly what the
cluster's queues allow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property

from quotas.policy.budget_effects import covers_all
from quotas.policy.budgets import BudgetAction, BudgetLevel, budget_status, period_bounds
from quotas.policy.kueue.reach import reachable
from quotas.policy.kueue.target import CompileError, KueueTarget, kueue_name, priority_class_name
from quotas.policy.kueue.translate import compile_kueue
from quotas.policy.placement import NO_TAINTS, FlavorTaints
from quotas.policy.quantity import Resource
from quotas.policy.sharing import EQUIVALENTS, GPU, MICRO
from quotas.policy.snapshot import OrgSnapshot

LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY = "kueue.x-k8s.io/priority-class"
LABEL_MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"
ANNOTATION_CHECKPOINT = "allot.dev/checkpoint-every"
"""Accepted as an annotation or a label (the annotation wins when both are set)."""
ANNOTATION_GPU_MEMORY = "allot.dev/gpu-memory-gb"
"""Copied by the mutating webhook into every pod template, so the pods a controller creates carry them."""
DEFAULT_ACCELERATORS: Mapping[str, str | None] = {"nvidia.com/gpu": None}
"""Extended resources counted as devices, and the flavor each belongs to (None: whichever flavor the
pod lands on)."""
DEFAULT_CONTROLLERS = frozenset(
    {
        "system:kube-controller-manager",
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:kueue-system:kueue-controller-manager",
        "system:serviceaccount:jobset-system:jobset-controller-manager",
        "system:serviceaccount:kubeflow:training-operator",
        "system:serviceaccount:ray-system:kuberay-operator",
    }
)
"""Identities whose objects, when they carry a controller ownerReference, are judged as part of the
workload that owns them: Kueue's Workloads for a job, the Job controller's pods, a JobSet's Jobs."""


@dataclass(frozen=True, slots=True)
class FlavorRule:
    name: str
    node_labels: Mapping[str, str]
    device_memory_gb: int
    profiles: Mapping[str, tuple[str, Fraction]] = field(default_factory=dict)
    """A shared flavor's slices (MIG profiles, MPS or time-sliced shares): per resource name, the profile's
    name and its weight in GPU-equivalents. Empty: whole devices (``nvidia.com/gpu``)."""
    sharing: str = "whole"
    taints: FlavorTaints = NO_TAINTS
    """Its nodes' taints and the tolerations Kueue gives its pods: a pod that does not tolerate a taint may
    not land on it (quotas.policy.placement)."""


@dataclass(frozen=True, slots=True)
class TierRule:
    name: str
    priority_class: str
    priority: int
    max_runtime_s: int | None
    opportunistic: bool


@dataclass(frozen=True, slots=True)
class BudgetRule:
    """A GPU-hour budget over this namespace's unit (its own or an ancestor's), as of compile time."""

    flavor: str
    unit_path: str
    tiers: frozenset[str]
    period: str
    spent_h: float
    allowance_h: float
    percent: float
    resets: str
    """The next period's first day, ``YYYY-MM-DD``."""
    stops: bool
    """Spent, and new workloads of its tiers are refused here: ``deny``, or a ``hold`` that spares a
    tier (a LocalQueue hold would stop them all)."""
    warn: bool
    """Past its warn threshold (or spent without stopping anything here): admitted with a warning."""


@dataclass(frozen=True, slots=True)
class NamespaceRule:
    namespace: str
    unit_path: str
    queue: str
    projects: frozenset[str]
    """Accepted values of the project label: slugs and paths of the unit and its descendants."""
    owners: frozenset[str]
    """Leads and members (portal and Slurm usernames) of the unit, its ancestors and descendants."""
    tiers: Mapping[str, TierRule]
    default_tier: str | None
    contract: str | None
    grace_period_s: int | None
    checkpoint_every_s: int | None
    ceilings: Mapping[str, int]
    """GPU ceiling per flavor name (GPU-equivalents on a shared flavor): the most this namespace's queue can
    ever hold — the tree's (guarantee + burst, capped by every ancestor's) or, where it is lower, what Kueue
    can reach with the compiled queues (quotas.policy.kueue.reach: a parent's own queue never takes its
    children's kept guarantees)."""
    budgets: tuple[BudgetRule, ...] = ()
    lead: str = ""
    """Whom to ask about this unit's quota and membership: ``lead-nlp (lead of acme/research/nlp)``, the nearest
    unit up the tree that has leads; "" where none has."""
    reach_limited: frozenset[str] = frozenset()
    """Flavors whose ceiling here is what Kueue can reach with the compiled queues, below the tree's guarantee +
    burst (a parent's own queue never takes its children's kept guarantees)."""


@dataclass(frozen=True)
class AdmissionPolicy:
    cluster: str
    revision: int
    namespaces: Mapping[str, NamespaceRule]
    flavors: tuple[FlavorRule, ...] = ()
    exempt_namespaces: frozenset[str] = field(default_factory=frozenset)
    accelerators: Mapping[str, str | None] = field(default_factory=lambda: dict(DEFAULT_ACCELERATORS))
    controllers: frozenset[str] = DEFAULT_CONTROLLERS
    covered: frozenset[str] | None = None
    """The resources the compiled ClusterQueues cover (their ``coveredResources``): Kueue matches a pod set's pins
    against the flavors only when it asks for one of them. None: not known (every pod set's pins are matched)."""
    ungoverned_gpu: str = "deny"
    """A GPU request in a namespace no team holds: ``deny`` (refused, naming the fix) or ``allow`` (admitted
    with a warning). Anything that asks for no accelerator there is never blocked."""

    @cached_property
    def counted(self) -> Mapping[str, str | None]:
        """Every resource counted as devices and its flavor: the configured accelerators and each shared
        flavor's slices (a slice two flavors offer: whichever the pod lands on)."""
        found: dict[str, str | None] = dict(self.accelerators)
        for flavor in self.flavors:
            for resource in flavor.profiles:
                found[resource] = flavor.name if resource not in found else None
        return found

    @cached_property
    def weights(self) -> Mapping[str, Fraction]:
        """GPU-equivalents per unit of each slice resource (a resource not here weighs 1)."""
        return {r: w for f in self.flavors for r, (_, w) in f.profiles.items()}

    @cached_property
    def whole_flavors(self) -> tuple[str, ...] | None:
        """The flavors whole devices land on; None when every flavor is whole (any flavor)."""
        if not any(f.profiles for f in self.flavors):
            return None
        return tuple(f.name for f in self.flavors if not f.profiles)

    @cached_property
    def flavor_labels(self) -> Mapping[str, Mapping[str, str]]:
        """Each flavor's node labels by its name, as ``quotas.policy.placement`` reads them."""
        return {f.name: f.node_labels for f in self.flavors}

    @cached_property
    def flavor_taints(self) -> Mapping[str, FlavorTaints]:
        """The flavors whose nodes are tainted, by name, as ``quotas.policy.placement`` reads them."""
        return {f.name: f.taints for f in self.flavors if f.taints.taints}

    @cached_property
    def flavor_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.flavors)

    @cached_property
    def offering(self) -> Mapping[str, tuple[str, ...]]:
        """Per counted resource, the flavors that offer it: a mapped accelerator its flavor, a slice the shared
        flavors that have it, whole GPUs the whole flavors (every flavor where none is shared)."""
        whole = self.flavor_names if self.whole_flavors is None else self.whole_flavors
        found: dict[str, tuple[str, ...]] = {}
        for name in self.counted:
            mapped = self.accelerators.get(name)
            if mapped is not None:
                found[name] = (mapped,)
            elif name in self.weights:
                found[name] = tuple(f.name for f in self.flavors if name in f.profiles)
            else:
                found[name] = whole
        return found

    def matched(self, names: set[str]) -> bool:
        """Kueue matches a pod set asking for ``names`` against the flavors: it asks for a covered resource (a
        slice counts as the currency its flavor's weight is in)."""
        if self.covered is None:
            return True
        return any(n in self.covered or (n in self.weights and EQUIVALENTS in self.covered) for n in names)

    @property
    def flavor_label_keys(self) -> frozenset[str]:
        """Node-label keys that name a flavor: a pod pinning one of these is pinned to a flavor."""
        return frozenset(k for f in self.flavors for k in f.node_labels)


def compile_policy(
    snapshot: OrgSnapshot,
    target: KueueTarget,
    *,
    members: Mapping[int, frozenset[str]],
    allowed_tiers: Mapping[int, frozenset[str]],
    flavor_memory: Mapping[str, int],
    leads: Mapping[int, frozenset[str]] | None = None,
) -> AdmissionPolicy:
    """One rule per bound namespace. ``members``: usernames per unit; ``allowed_tiers``: tiers set on a
    unit (empty inherits from the parent; nothing set anywhere allows every tier); ``leads``: each unit's leads,
    named in refusals as whom to ask."""
    flavors = tuple(
        FlavorRule(
            f.name,
            dict(f.node_labels),
            flavor_memory.get(f.key, 0),
            {p.resource: (p.name, p.weight) for p in f.sharing.profiles},
            f.sharing.sharing.value,
            FlavorTaints(tuple(f.node_taints), tuple(f.tolerations)),
        )
        for f in sorted(target.flavors, key=lambda f: f.name)
    )
    tiers = {
        name: TierRule(name, priority_class_name(name), t.priority, t.max_runtime_s, t.opportunistic)
        for name, t in snapshot.tiers.items()
    }
    rules = {}
    budgets = _budget_rules(snapshot, target)
    covered: frozenset[str] | None = None
    try:
        objects = compile_kueue(snapshot, target)
        reach = {
            k: int(v) if k[2] == GPU else int(v) // MICRO  # the currency of shared flavors is in millionths
            for k, v in reachable(objects).items()
            if k[2] in (GPU, EQUIVALENTS)
        }
        covered = frozenset(
            str(name)
            for o in objects
            if o["kind"] == "ClusterQueue"
            for group in o["spec"].get("resourceGroups") or ()
            for name in group["coveredResources"]
        )
    except CompileError:  # the sync refuses such a tree with the reason; judge by the tree's ceilings meanwhile
        reach = {}
    for uid, namespaces in target.namespaces.items():
        if uid not in snapshot.units:
            continue
        queue_unit = _queue_unit(snapshot, target, uid)
        found = tuple(b for u in [uid, *snapshot.ancestors(uid)] for b in budgets.get(u, ()))
        for namespace in namespaces:
            rule = _rule(snapshot, target, uid, queue_unit, namespace, tiers, members, allowed_tiers, reach)
            rule = replace(rule, lead=_lead(snapshot, uid, leads or {}))
            rules[namespace] = replace(rule, budgets=found) if found else rule
    return AdmissionPolicy(target.cluster, target.revision, rules, flavors, covered=covered)


def _budget_rules(snapshot: OrgSnapshot, target: KueueTarget) -> dict[int, list[BudgetRule]]:
    """Per unit with a budget on this cluster's flavors: what admission makes of it now."""
    if target.at is None or not snapshot.budgets:
        return {}
    at = target.at
    names = {f.key: f.name for f in target.flavors}
    found: dict[int, list[BudgetRule]] = {}
    for (uid, key), budget in sorted(snapshot.budgets.items()):
        if key not in names or uid not in snapshot.units or (budget.starts and budget.starts > at.date()):
            continue
        start, end = period_bounds(budget.period, at)
        spend = snapshot.budget_spend.get((uid, key))
        if spend is None or spend.period_start != start:
            continue  # not evaluated this period yet: nothing spent to speak of
        status = budget_status(budget, allowance=spend.allowance, spent=spend.spent, rate_per_day=0.0, now=at)
        spent = status.level is BudgetLevel.SPENT
        stops = spent and (
            budget.action is BudgetAction.DENY
            or (budget.action is BudgetAction.HOLD and not covers_all(budget, snapshot.tiers))
        )
        warn = not stops and status.level is not BudgetLevel.OK
        if stops or warn:
            found.setdefault(uid, []).append(
                BudgetRule(
                    names[key],
                    snapshot.units[uid].path,
                    frozenset(budget.tiers),
                    budget.period.value,
                    spend.spent,
                    spend.allowance,
                    status.percent,
                    end.date().isoformat(),
                    stops,
                    warn,
                )
            )
    return found


def _queue_unit(snapshot: OrgSnapshot, target: KueueTarget, uid: int) -> int:
    """The unit whose ClusterQueue admits this unit's namespaces: the unit itself when it has quota on
    the cluster, else the nearest ancestor that has (uncapped projects fold into their team)."""
    keys = {f.key for f in target.flavors}
    node: int | None = uid
    while node is not None:
        if any((node, key, Resource.GPU) in snapshot.quotas for key in keys):
            return node
        node = snapshot.units[node].parent_id if node in snapshot.units else None
    return uid


def _rule(
    snapshot: OrgSnapshot,
    target: KueueTarget,
    uid: int,
    queue_unit: int,
    namespace: str,
    tiers: Mapping[str, TierRule],
    members: Mapping[int, frozenset[str]],
    allowed_tiers: Mapping[int, frozenset[str]],
    reach: Mapping[tuple[str, str, str], int],
) -> NamespaceRule:
    unit = snapshot.units[uid]
    family = [uid, *snapshot.ancestors(uid), *_descendants(snapshot, uid)]
    projects = {snapshot.units[d].slug for d in [uid, *_descendants(snapshot, uid)]}
    projects |= {snapshot.units[d].path for d in [uid, *_descendants(snapshot, uid)]}
    allowed = next((allowed_tiers[u] for u in [uid, *snapshot.ancestors(uid)] if allowed_tiers.get(u)), None)
    usable = {n: t for n, t in tiers.items() if allowed is None or n in allowed}
    default = min(usable.values(), key=lambda t: t.priority).name if usable else None
    contract = snapshot.effective_contract(uid)
    queue = snapshot.units[queue_unit]
    queue_name = queue.kueue_name or kueue_name(queue.path)
    ceilings, limited = {}, set()
    for flavor in target.flavors:
        tree = min(
            snapshot.quota(u, flavor.key, Resource.GPU).ceiling for u in [queue_unit, *snapshot.ancestors(queue_unit)]
        )
        counted = EQUIVALENTS if flavor.sharing.shared else GPU
        ceilings[flavor.name] = min(tree, reach.get((queue_name, flavor.name, counted), tree))
        if ceilings[flavor.name] < tree:
            limited.add(flavor.name)
    return NamespaceRule(
        namespace=namespace,
        unit_path=unit.path,
        queue=target.local_queue_names.get(namespace, queue_name),
        projects=frozenset(projects),
        owners=frozenset().union(*(members.get(u, frozenset()) for u in family)),
        tiers=usable,
        default_tier=default,
        contract=contract.name if contract else None,
        grace_period_s=contract.grace_period_s if contract else None,
        checkpoint_every_s=contract.checkpoint_every_s if contract else None,
        ceilings=ceilings,
        reach_limited=frozenset(limited),
    )


def _lead(snapshot: OrgSnapshot, uid: int, leads: Mapping[int, frozenset[str]]) -> str:
    """The nearest leads up the tree from ``uid``, with the unit they lead."""
    for u in [uid, *snapshot.ancestors(uid)]:
        if leads.get(u):
            return f"{', '.join(sorted(leads[u]))} (lead of {snapshot.units[u].path})"
    return ""


def _descendants(snapshot: OrgSnapshot, uid: int) -> list[int]:
    found: list[int] = []
    pending = list(snapshot.children.get(uid, ()))
    while pending:
        node = pending.pop()
        found.append(node)
        pending.extend(snapshot.children.get(node, ()))
    return found
