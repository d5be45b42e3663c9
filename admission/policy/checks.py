"""The validation rules. Each check reads a ``Review`` and returns the denials it finds (empty: fine).

Every denial says which rule, the numbers, and what to do. ``decide`` runs them in order; the first
denial is the answer, and an UPDATE compares the whole list with the old object's (see decide.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from quotas.policy.durations import DurationError, format_duration, parse_duration

from .model import (
    ANNOTATION_CHECKPOINT,
    LABEL_CONTRACT,
    LABEL_MAX_EXEC,
    LABEL_OWNER,
    LABEL_PROJECT,
    LABEL_TIER,
    AdmissionPolicy,
    NamespaceRule,
    TierRule,
)
from .workload import PodSet, describe_requirements, node_requirements

WPC_GROUP, WPC_KIND = "kueue.x-k8s.io", "WorkloadPriorityClass"
MAX_WARNING = 120
"""Characters per admission warning: Kubernetes asks to keep them under 120 (longer ones may be cut)."""
KUBERNETES_DEFAULT_GRACE_S = 30
"""The API server defaults ``terminationGracePeriodSeconds`` to 30 in every pod spec before mutating
admission, so 30 reads as "not chosen": the mutating webhook replaces it with the contract's grace on
opportunistic tiers, and it is never refused as above the contract. A grace the user chose above the
contract's is refused; below it, allowed (the pod exits sooner than it may)."""


class Reason(StrEnum):
    ALLOWED = "allowed"
    NOT_CHECKED = "not_checked"
    """DELETE/CONNECT, or a namespace exempt from Allot's rules."""
    OWNED = "owned"
    """Created by a trusted controller for a workload Allot already judged (Kueue's Workload for a Job,
    the Job controller's pods): only its devices are checked."""
    UNCHANGED = "unchanged"
    """An UPDATE that adds no violation the object did not already have."""
    MALFORMED = "malformed"
    TOO_LARGE = "too_large"
    POLICY_UNAVAILABLE = "policy_unavailable"
    UNSUPPORTED_KIND = "unsupported_kind"
    NAMESPACE_UNBOUND = "namespace_unbound"
    MISSING_LABEL = "missing_label"
    UNKNOWN_OWNER = "unknown_owner"
    UNKNOWN_PROJECT = "unknown_project"
    TIER_NOT_ALLOWED = "tier_not_allowed"
    WRONG_CONTRACT = "wrong_contract"
    WRONG_QUEUE = "wrong_queue"
    WRONG_PRIORITY_CLASS = "wrong_priority_class"
    EXCEEDS_CEILING = "exceeds_ceiling"
    UNKNOWN_FLAVOR = "unknown_flavor"
    UNGOVERNED_ACCELERATOR = "ungoverned_accelerator"
    RUNTIME_REQUIRED = "runtime_required"
    RUNTIME_TOO_LONG = "runtime_too_long"
    CHECKPOINT_REQUIRED = "checkpoint_required"
    CHECKPOINT_TOO_SLOW = "checkpoint_too_slow"
    GRACE_TOO_LONG = "grace_too_long"
    BUDGET_SPENT = "budget_spent"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: Reason
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()
    unit: str = ""
    kind: str = ""


RUNTIME_FIELDS = {
    "Pod": "spec.activeDeadlineSeconds",
    "Job": "spec.activeDeadlineSeconds",
    "RayJob": "spec.activeDeadlineSeconds",
    "PyTorchJob": "spec.runPolicy.activeDeadlineSeconds",
    "Workload": "spec.maximumExecutionTimeSeconds",
}
"""Where each kind carries its own runtime limit (JobSet has none: the label only)."""


@dataclass
class Review:
    """One object under review, with what the checks read from it (labels, or a Workload's spec)."""

    policy: AdmissionPolicy
    group: str
    kind: str
    obj: Mapping[str, Any]
    rule: NamespaceRule
    sets: list[PodSet]
    labels: dict[str, str]
    annotations: dict[str, str]
    patch: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_workload(self) -> bool:
        """A Kueue Workload: Kueue acts on its spec (queueName, priorityClassRef, …), not its labels."""
        return self.kind == "Workload"

    @property
    def spec(self) -> Mapping[str, Any]:
        spec = self.obj.get("spec")
        return spec if isinstance(spec, Mapping) else {}

    def queue(self) -> str | None:
        if self.is_workload:
            return _str(self.spec.get("queueName"))
        return self.labels.get("kueue.x-k8s.io/queue-name")

    def priority_class(self) -> str | None:
        if self.is_workload:
            ref = self.spec.get("priorityClassRef")
            if not isinstance(ref, Mapping):
                return None
            if (ref.get("group"), ref.get("kind")) != (WPC_GROUP, WPC_KIND):
                return f"{ref.get('kind')}/{ref.get('name')}"
            return _str(ref.get("name"))
        return self.labels.get("kueue.x-k8s.io/priority-class")

    def tier_name(self) -> str | None:
        """The tier label; on a Workload without one, the tier whose priority class it references."""
        tier = self.labels.get(LABEL_TIER)
        if tier or not self.is_workload:
            return tier or None
        cls = self.priority_class()
        return next((t.name for t in self.rule.tiers.values() if t.priority_class == cls), None)

    def tier(self) -> TierRule | None:
        name = self.tier_name()
        return self.rule.tiers.get(name) if name else None

    def runtime_s(self) -> int | None:
        """The shortest runtime limit the object declares (Kueue's label, or the kind's own field);
        -1 when one is not a whole number."""
        found: list[int] = []
        label = self.labels.get(LABEL_MAX_EXEC)
        if label is not None and not self.is_workload:
            found.append(int(label) if label.isdigit() else -1)
        path = RUNTIME_FIELDS.get(self.kind)
        if path:
            value: Any = self.obj
            for part in path.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is not None:
                found.append(value if isinstance(value, int) and not isinstance(value, bool) else -1)
        return min(found) if found else None

    def checkpoint(self) -> str | None:
        return self.annotations.get(ANNOTATION_CHECKPOINT) or self.labels.get(ANNOTATION_CHECKPOINT)

    def deny(self, reason: Reason, message: str) -> Decision:
        return Decision(False, reason, message, (), (), self.rule.unit_path, self.kind)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


Check = Callable[[Review], list[Decision]]


# --- who: labels --------------------------------------------------------------------------------


def labels(r: Review) -> list[Decision]:
    rule, lab = r.rule, r.labels
    missing = [k for k in (LABEL_OWNER, LABEL_PROJECT, LABEL_TIER) if not lab.get(k)]  # a Workload's too
    if rule.contract and not lab.get(LABEL_CONTRACT):
        missing.append(LABEL_CONTRACT)
    found = []
    if missing:  # reported with every other label problem, so an UPDATE is judged violation by violation
        found.append(
            r.deny(
                Reason.MISSING_LABEL,
                f"label {', '.join(missing)} missing: every workload in {rule.namespace} "
                f"says who owns it, its project, tier and contract "
                f"(e.g. {LABEL_TIER}={rule.default_tier or 'P3'}, {LABEL_CONTRACT}={rule.contract or 'none'})",
            )
        )
    owner, project, tier = lab.get(LABEL_OWNER), lab.get(LABEL_PROJECT), r.tier_name()
    if owner and rule.owners and owner not in rule.owners:
        found.append(
            r.deny(
                Reason.UNKNOWN_OWNER,
                f"owner {owner!r} is not a member of {rule.unit_path}: ask its lead to add you in Allot",
            )
        )
    if project and project not in rule.projects:
        known = ", ".join(sorted(p for p in rule.projects if "/" not in p))
        found.append(
            r.deny(
                Reason.UNKNOWN_PROJECT,
                f"project {project!r} is not {rule.unit_path} or one of its projects; use one of: {known}",
            )
        )
    if tier and tier not in rule.tiers:
        allowed = ", ".join(sorted(rule.tiers)) or "none"
        found.append(
            r.deny(Reason.TIER_NOT_ALLOWED, f"tier {tier!r} is not allowed for {rule.unit_path}; allowed: {allowed}")
        )
    contract = lab.get(LABEL_CONTRACT)
    if rule.contract and contract and contract != rule.contract:
        found.append(
            r.deny(
                Reason.WRONG_CONTRACT,
                f"contract {contract!r} does not apply to {rule.unit_path}: set {LABEL_CONTRACT}={rule.contract}",
            )
        )
    return found


# --- where: queue and priority ----------------------------------------------------------------------


def queue_and_priority(r: Review) -> list[Decision]:
    rule, tier = r.rule, r.tier()
    found = []
    queue = r.queue()
    if queue != rule.queue:
        field_name = "spec.queueName" if r.is_workload else "label kueue.x-k8s.io/queue-name"
        found.append(
            r.deny(
                Reason.WRONG_QUEUE,
                f"{field_name} is {queue!r}; workloads in {rule.namespace} go to LocalQueue {rule.queue!r}",
            )
        )
    if tier is None:
        return found
    cls = r.priority_class()
    if cls != tier.priority_class:
        field_name = "spec.priorityClassRef" if r.is_workload else "label kueue.x-k8s.io/priority-class"
        found.append(
            r.deny(
                Reason.WRONG_PRIORITY_CLASS,
                f"{field_name} is {cls!r}; tier {tier.name} runs at {tier.priority_class!r}",
            )
        )
    priority = r.spec.get("priority") if r.is_workload else None
    if isinstance(priority, int) and priority > tier.priority:
        found.append(
            r.deny(
                Reason.WRONG_PRIORITY_CLASS,
                f"spec.priority {priority} is above tier {tier.name}'s {tier.priority}: "
                f"remove it (Kueue sets it from the priority class)",
            )
        )
    return found


# --- how much: devices and flavors -----------------------------------------------------------------


def fitting_flavors(r: Review, podset: PodSet) -> tuple[str, ...] | None:
    """The flavors a pod set may land on given its node selector AND its required node affinity (any
    of its terms), as Kubernetes combines them; None when no requirement names a flavor label (any
    flavor); () when no flavor satisfies them. Requirements on labels no flavor uses are left to
    the scheduler; a flavor that lacks a flavor label another flavor uses is not ruled out by it."""
    keys = r.policy.flavor_label_keys
    selector, terms = node_requirements(podset.spec)
    if not any(k in keys for k, _, _ in selector) and not any(k in keys for term in terms for k, _, _ in term):
        return None
    return tuple(
        f.name
        for f in r.policy.flavors
        if all(_holds(f.node_labels, req, keys) for req in selector)
        and (not terms or any(all(_holds(f.node_labels, req, keys) for req in term) for term in terms))
    )


def _holds(labels: Mapping[str, str], requirement: tuple[str, str, tuple[str, ...]], keys: Any) -> bool:
    key, op, values = requirement
    if key not in keys or key not in labels:
        return True  # not a flavor label, or not one this flavor's nodes are known by
    value = labels[key]
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in ("Gt", "Lt") and values and value.lstrip("-").isdigit() and values[0].lstrip("-").isdigit():
        return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
    return True


def _where(flavors: tuple[str, ...] | None) -> str:
    if flavors is None:
        return "on any flavor"
    return f"on {flavors[0]}" if len(flavors) == 1 else f"on any of {', '.join(flavors)}"


def _unknown_pin(r: Review, podset: PodSet, what: str) -> Decision:
    known = "; ".join(
        f"{f.name} ({', '.join(f'{k}={v}' for k, v in sorted(f.node_labels.items()))})" for f in r.policy.flavors
    )
    return r.deny(
        Reason.UNKNOWN_FLAVOR,
        f"{podset.name} is pinned to {describe_requirements(podset.spec)}, which {what} cluster {r.policy.cluster} "
        f"has: it would wait forever; flavors: {known or 'none'}",
    )


def devices(r: Review) -> list[Decision]:
    """Per group of pod sets that may land on the same flavors: the devices they hold at once must fit
    the largest ceiling among those flavors; a pin no flavor matches, and accelerators Allot does not
    count, are refused."""
    policy, rule = r.policy, r.rule
    found = []
    groups: dict[tuple[str, ...] | None, int] = {}
    for podset in r.sets:
        ungoverned = podset.ungoverned(policy.accelerators)
        if ungoverned:
            found.append(
                r.deny(
                    Reason.UNGOVERNED_ACCELERATOR,
                    f"{podset.name} asks for {', '.join(ungoverned)}, which Allot does not count on cluster "
                    f"{policy.cluster}: request {' or '.join(sorted(policy.accelerators))}, or ask a platform "
                    f"admin to map it to a flavor (ALLOT_ADMISSION_ACCELERATORS)",
                )
            )
        if not podset.count:
            continue
        fitting = fitting_flavors(r, podset)
        if fitting == ():  # whatever it asks for, GPUs or none: no node of any flavor satisfies the pin
            found.append(_unknown_pin(r, podset, "no flavor of"))
            continue
        for flavor, per_pod in podset.devices_per_pod(policy.accelerators).items():
            key: tuple[str, ...] | None = fitting
            if flavor is not None:  # a resource mapped to one flavor: the pin must allow it
                if fitting is not None and flavor not in fitting:
                    found.append(_unknown_pin(r, podset, f"not {flavor} (where its devices are), nor any flavor of"))
                    continue
                key = (flavor,)
            groups[key] = groups.get(key, 0) + podset.count * per_pod
    for key, wanted in sorted(groups.items(), key=lambda kv: str(kv[0])):
        names = tuple(rule.ceilings) if key is None else key
        limit = max((rule.ceilings.get(n, 0) for n in names), default=0)
        if wanted <= limit:
            continue
        if limit == 0:
            message = (
                f"asks for {wanted} GPUs {_where(key)}, but {rule.unit_path} has no quota there: "
                f"ask for quota in Allot, or use a flavor it has"
            )
        else:
            message = (
                f"asks for {wanted} GPUs {_where(key)}, but {rule.unit_path} can never hold more than {limit} there "
                f"(guarantee + burst): it would wait forever; ask for at most {limit}, or request a larger quota"
            )
        found.append(r.deny(Reason.EXCEEDS_CEILING, message))
    return found


# --- how long: runtime, checkpoints, grace ---------------------------------------------------------


def runtime(r: Review) -> list[Decision]:
    tier = r.tier()
    if tier is None or tier.max_runtime_s is None:
        return []
    value = r.runtime_s()
    limit = format_duration(tier.max_runtime_s)
    if value is None or value <= 0:
        own = RUNTIME_FIELDS.get(r.kind)
        where = (
            own
            if r.is_workload
            else (f"{own} or label {LABEL_MAX_EXEC}" if own else f"label {LABEL_MAX_EXEC} ({r.kind} has no field)")
        )
        return [
            r.deny(
                Reason.RUNTIME_REQUIRED,
                f"tier {tier.name} is limited to {limit}: set {where} (seconds, at most {tier.max_runtime_s})",
            )
        ]
    if value > tier.max_runtime_s:
        return [
            r.deny(
                Reason.RUNTIME_TOO_LONG,
                f"runtime {format_duration(value)} is above tier {tier.name}'s limit of {limit}: "
                f"shorten it or use a batch tier",
            )
        ]
    return []


def opportunistic(r: Review) -> list[Decision]:
    tier, rule = r.tier(), r.rule
    if tier is None or not tier.opportunistic:
        return []
    raw = r.checkpoint()
    example = format_duration(rule.checkpoint_every_s or 900)
    if raw is None:
        return [
            r.deny(
                Reason.CHECKPOINT_REQUIRED,
                f"tier {tier.name} runs on borrowed GPUs and can be reclaimed: declare how often it checkpoints "
                f"with annotation (or label) {ANNOTATION_CHECKPOINT}, e.g. {ANNOTATION_CHECKPOINT}={example}",
            )
        ]
    try:
        every = parse_duration(raw)
    except DurationError:
        return [
            r.deny(
                Reason.CHECKPOINT_REQUIRED, f"{ANNOTATION_CHECKPOINT}={raw!r} is not a duration: write e.g. {example}"
            )
        ]
    found = []
    if rule.checkpoint_every_s and (every <= 0 or every > rule.checkpoint_every_s):
        found.append(
            r.deny(
                Reason.CHECKPOINT_TOO_SLOW,
                f"checkpoints every {format_duration(every)}, but contract {rule.contract} needs at least every "
                f"{format_duration(rule.checkpoint_every_s)}",
            )
        )
    if rule.grace_period_s is not None:
        for podset in r.sets:
            grace = podset.spec.get("terminationGracePeriodSeconds")
            chosen = isinstance(grace, int) and grace != KUBERNETES_DEFAULT_GRACE_S  # 30: the API server's default
            if chosen and isinstance(grace, int) and grace > rule.grace_period_s:
                found.append(
                    r.deny(
                        Reason.GRACE_TOO_LONG,
                        f"{podset.name}: terminationGracePeriodSeconds {grace} is above contract {rule.contract}'s "
                        f"grace period of {rule.grace_period_s}: set it to at most {rule.grace_period_s} "
                        f"(or leave it out: Allot's mutating webhook then sets the contract's)",
                    )
                )
    return found


def budgets(r: Review) -> list[Decision]:
    """A spent ``deny`` budget (or a ``hold`` that spares a tier) over the unit refuses new workloads of
    its tiers that ask for devices which may land on its flavor; running ones are never touched."""
    tier = r.tier_name() or r.rule.default_tier
    found = []
    for budget in r.rule.budgets:
        if budget.stops and tier in budget.tiers and _may_use(r, budget.flavor):
            found.append(
                r.deny(
                    Reason.BUDGET_SPENT,
                    f"{budget.unit_path} has spent its {budget.period} {budget.flavor} budget "
                    f"({budget.spent_h:,.0f} of {budget.allowance_h:,.0f} device-hours): new {tier} workloads "
                    f"asking for {budget.flavor} GPUs are refused until {budget.resets}, when it resets, or until "
                    "it is raised in Allot (a lead above can approve a change request)",
                )
            )
    return found


def budget_warnings(r: Review) -> list[str]:
    """An admission warning for each budget over the unit past its warn threshold that this workload
    would spend (admitted: a warning, not a denial)."""
    tier = r.tier_name() or r.rule.default_tier
    return [
        (
            f"{b.unit_path} spent {b.percent:.0f}% of its {b.flavor} budget "
            f"({b.spent_h:,.0f}/{b.allowance_h:,.0f} GPU-h; resets {b.resets})"
        )[:MAX_WARNING]
        for b in r.rule.budgets
        if b.warn and tier in b.tiers and _may_use(r, b.flavor)
    ]


def _may_use(r: Review, flavor: str) -> bool:
    """Some pod set asks for devices that may land on ``flavor``."""
    for podset in r.sets:
        if not podset.count:
            continue
        fitting = fitting_flavors(r, podset)
        for mapped in podset.devices_per_pod(r.policy.accelerators):
            if (mapped is None or mapped == flavor) and (fitting is None or flavor in fitting):
                return True
    return False


FULL: tuple[Check, ...] = (labels, queue_and_priority, devices, runtime, opportunistic, budgets)
OWNED: tuple[Check, ...] = (devices,)
