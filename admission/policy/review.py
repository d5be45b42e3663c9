"""What a check reads and answers: the ``Review`` of one object (its pod sets, labels, the policy), the
``Decision`` (a denial with its reason, numbers and what to do) and the reasons' names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from quotas.policy.labels import LABEL_TIER

from .model import ANNOTATION_CHECKPOINT, LABEL_MAX_EXEC, AdmissionPolicy, NamespaceRule, TierRule
from .workload import PodSet

WPC_GROUP, WPC_KIND = "kueue.x-k8s.io", "WorkloadPriorityClass"
V1BETA1_WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
"""v1beta1's ``spec.priorityClassSource`` for a WorkloadPriorityClass (Kueue ≤ v0.14)."""


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
    """A pin (node selector, required node affinity, tolerations) no flavor of the cluster satisfies."""
    PIN_MISMATCH = "pin_mismatch"
    """A pin some flavors satisfy, none of which offers what the pod asks for (whole GPUs, a slice, an accelerator)."""
    UNGOVERNED_ACCELERATOR = "ungoverned_accelerator"
    PROFILE_NOT_OFFERED = "profile_not_offered"
    """A MIG profile or shared GPU no flavor of the cluster offers, whole GPUs where every flavor is shared, or
    whole GPUs and slices in one pod (no flavor offers both)."""
    RUNTIME_REQUIRED = "runtime_required"
    RUNTIME_TOO_LONG = "runtime_too_long"
    CHECKPOINT_REQUIRED = "checkpoint_required"
    CHECKPOINT_TOO_SLOW = "checkpoint_too_slow"
    GRACE_TOO_LONG = "grace_too_long"
    GRACE_REQUIRED = "grace_required"
    FRACTIONAL_DEVICE = "fractional_device"
    """Part of a GPU (``500m``): Allot counts whole devices."""
    """An opportunistic pod without the contract's grace period: what the mutating webhook would have set."""
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
    "MPIJob": "spec.runPolicy.activeDeadlineSeconds",
    "TFJob": "spec.runPolicy.activeDeadlineSeconds",
    "Workload": "spec.maximumExecutionTimeSeconds",
}
"""Where each kind carries its own runtime limit (JobSet and LeaderWorkerSet have none: the label only)."""


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
            return text_of(self.spec.get("queueName"))
        return self.labels.get("kueue.x-k8s.io/queue-name")

    @property
    def is_v1beta1_workload(self) -> bool:
        """A Workload of an older Kueue (≤ v0.14, ``kueue.x-k8s.io/v1beta1``): its priority class is
        ``spec.priorityClassName`` with ``spec.priorityClassSource`` where v1beta2 has ``priorityClassRef``."""
        return self.is_workload and self.obj.get("apiVersion") == f"{WPC_GROUP}/v1beta1"

    def priority_class(self) -> str | None:
        if self.is_v1beta1_workload:
            name = text_of(self.spec.get("priorityClassName"))
            if name is None:
                return None
            # Kueue v1beta1: the source is this for a WorkloadPriorityClass; "scheduling.k8s.io/priorityclass"
            # (or, as Kueue's defaulting leaves it, "") for a pod PriorityClass
            source = self.spec.get("priorityClassSource")
            return name if source == V1BETA1_WPC_SOURCE else f"PriorityClass/{name}"
        if self.is_workload:
            ref = self.spec.get("priorityClassRef")
            if not isinstance(ref, Mapping):
                return None
            if (ref.get("group"), ref.get("kind")) != (WPC_GROUP, WPC_KIND):
                return f"{ref.get('kind')}/{ref.get('name')}"
            return text_of(ref.get("name"))
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


def text_of(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


Check = Callable[[Review], list[Decision]]
