"""Admission decisions: validate (allow or deny, with a reason a researcher understands) and mutate
(the JSON patch that fills in what Allot can fill in). Pure and fast: reads only the compiled policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from quotas.policy.durations import DurationError, format_duration, parse_duration

from .model import (
    ANNOTATION_CHECKPOINT,
    ANNOTATION_GPU_MEMORY,
    LABEL_CONTRACT,
    LABEL_MAX_EXEC,
    LABEL_OWNER,
    LABEL_PRIORITY,
    LABEL_PROJECT,
    LABEL_QUEUE,
    LABEL_TIER,
    AdmissionPolicy,
    NamespaceRule,
)
from .workload import KINDS, PodSet, WorkloadError, pod_sets, selected_labels

MAX_WARNING = 120


class Reason(StrEnum):
    ALLOWED = "allowed"
    NOT_CHECKED = "not_checked"
    """DELETE/CONNECT, or a namespace exempt from Allot's rules."""
    MALFORMED = "malformed"
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
    RUNTIME_REQUIRED = "runtime_required"
    RUNTIME_TOO_LONG = "runtime_too_long"
    CHECKPOINT_REQUIRED = "checkpoint_required"
    CHECKPOINT_TOO_SLOW = "checkpoint_too_slow"
    GRACE_TOO_LONG = "grace_too_long"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: Reason
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()
    unit: str = ""
    kind: str = ""


@dataclass
class _Review:
    policy: AdmissionPolicy
    group: str
    kind: str
    obj: Mapping[str, Any]
    rule: NamespaceRule
    sets: list[PodSet]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    patch: list[dict[str, Any]] = field(default_factory=list)


def decide(policy: AdmissionPolicy, request: Mapping[str, Any], *, mutate: bool = False) -> Decision:
    """Decide on an AdmissionRequest (the ``request`` of an AdmissionReview).

    With ``mutate`` the decision carries the patch that sets what is missing (queue, tier, priority
    class, runtime limit, grace period); validation then judges the object as patched."""
    try:
        return _decide(policy, request, mutate)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        return _deny(
            Reason.MALFORMED,
            f"the object is malformed ({type(exc).__name__}: {exc}); check it against its kind's schema",
        )


def _decide(policy: AdmissionPolicy, request: Mapping[str, Any], mutate: bool) -> Decision:
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return Decision(True, Reason.NOT_CHECKED)
    kind_info = request.get("kind")
    if not isinstance(kind_info, Mapping):
        return _deny(Reason.MALFORMED, "request.kind is missing")
    group, kind = str(kind_info.get("group", "")), str(kind_info.get("kind", ""))
    if (group, kind) not in KINDS:
        return _deny(
            Reason.UNSUPPORTED_KIND,
            f"{group or 'core'}/{kind} is not a kind Allot admits; the webhook configuration should not send it",
            kind=kind,
        )
    obj = request.get("object")
    namespace = str(request.get("namespace") or "")
    if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
        return _deny(Reason.MALFORMED, f"the {kind} has no object or metadata", kind=kind)
    if namespace in policy.exempt_namespaces:
        return Decision(True, Reason.NOT_CHECKED, kind=kind)
    rule = policy.namespaces.get(namespace)
    if rule is None:
        return _deny(
            Reason.NAMESPACE_UNBOUND,
            f"namespace {namespace!r} is not bound to any team on cluster "
            f"{policy.cluster}: ask a platform admin to bind it in Allot",
            kind=kind,
        )
    try:
        sets = pod_sets(group, kind, obj)
    except WorkloadError as exc:
        return _deny(Reason.MALFORMED, str(exc), kind=kind, unit=rule.unit_path)
    meta = obj["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for name, values in (("labels", labels), ("annotations", annotations)):
        if not isinstance(values, Mapping) or not all(isinstance(v, str) for v in values.values()):
            return _deny(
                Reason.MALFORMED, f"metadata.{name} must map strings to strings", kind=kind, unit=rule.unit_path
            )
    review = _Review(policy, group, kind, obj, rule, sets, dict(labels), dict(annotations))
    if mutate:
        _mutate(review)
    denial = _validate(review)
    if denial is not None:
        return denial
    return Decision(True, Reason.ALLOWED, "", tuple(_warnings(review)), tuple(review.patch), rule.unit_path, kind)


def _deny(reason: Reason, message: str, *, kind: str = "", unit: str = "") -> Decision:
    return Decision(False, reason, message, (), (), unit, kind)


# --- validation ---------------------------------------------------------------------------------


def _validate(r: _Review) -> Decision | None:
    for check in (_labels, _queue_and_priority, _devices, _runtime, _opportunistic):
        denial = check(r)
        if denial is not None:
            return denial
    return None


def _labels(r: _Review) -> Decision | None:
    rule, labels = r.rule, r.labels
    missing = [k for k in (LABEL_OWNER, LABEL_PROJECT, LABEL_TIER) if not labels.get(k)]
    if rule.contract and not labels.get(LABEL_CONTRACT):
        missing.append(LABEL_CONTRACT)
    if missing:
        return _deny(
            Reason.MISSING_LABEL,
            f"label {', '.join(missing)} missing: every workload in {rule.namespace} "
            f"says who owns it, its project, tier and contract "
            f"(e.g. {LABEL_TIER}={rule.default_tier or 'P3'}, "
            f"{LABEL_CONTRACT}={rule.contract or 'none'})",
            kind=r.kind,
            unit=rule.unit_path,
        )
    owner, project, tier = labels[LABEL_OWNER], labels[LABEL_PROJECT], labels[LABEL_TIER]
    if rule.owners and owner not in rule.owners:
        return _deny(
            Reason.UNKNOWN_OWNER,
            f"owner {owner!r} is not a member of {rule.unit_path}: ask its lead to add you in Allot",
            kind=r.kind,
            unit=rule.unit_path,
        )
    if project not in rule.projects:
        known = ", ".join(sorted(p for p in rule.projects if "/" not in p))
        return _deny(
            Reason.UNKNOWN_PROJECT,
            f"project {project!r} is not {rule.unit_path} or one of its projects; use one of: {known}",
            kind=r.kind,
            unit=rule.unit_path,
        )
    if tier not in rule.tiers:
        allowed = ", ".join(sorted(rule.tiers)) or "none"
        return _deny(
            Reason.TIER_NOT_ALLOWED,
            f"tier {tier!r} is not allowed for {rule.unit_path}; allowed: {allowed}",
            kind=r.kind,
            unit=rule.unit_path,
        )
    contract = labels.get(LABEL_CONTRACT)
    if rule.contract and contract != rule.contract:
        return _deny(
            Reason.WRONG_CONTRACT,
            f"contract {contract!r} does not apply to {rule.unit_path}: set {LABEL_CONTRACT}={rule.contract}",
            kind=r.kind,
            unit=rule.unit_path,
        )
    return None


def _queue_and_priority(r: _Review) -> Decision | None:
    rule, labels = r.rule, r.labels
    queue = labels.get(LABEL_QUEUE)
    if queue != rule.queue:
        return _deny(
            Reason.WRONG_QUEUE,
            f"{LABEL_QUEUE} is {queue!r}; workloads in {rule.namespace} go to LocalQueue {rule.queue!r}",
            kind=r.kind,
            unit=rule.unit_path,
        )
    tier = rule.tiers[labels[LABEL_TIER]]
    priority = labels.get(LABEL_PRIORITY)
    if priority != tier.priority_class:
        return _deny(
            Reason.WRONG_PRIORITY_CLASS,
            f"{LABEL_PRIORITY} is {priority!r}; tier {tier.name} runs at {tier.priority_class!r}",
            kind=r.kind,
            unit=rule.unit_path,
        )
    return None


def _flavor_of(r: _Review, podset: PodSet) -> str | None:
    """The flavor a pod set is pinned to by its node selector or required affinity, if exactly one fits."""
    required = selected_labels(podset.spec)
    if not required:
        return None
    fitting = [
        f.name
        for f in r.policy.flavors
        if f.node_labels
        and all(f.node_labels.get(k) in v for k, v in required.items() if k in f.node_labels)
        and any(k in f.node_labels for k in required)
    ]
    return fitting[0] if len(fitting) == 1 else None


def _devices(r: _Review) -> Decision | None:
    per_flavor: dict[str | None, int] = {}
    for podset in r.sets:
        gpus = podset.count * podset.gpus_per_pod
        if gpus:
            flavor = _flavor_of(r, podset)
            per_flavor[flavor] = per_flavor.get(flavor, 0) + gpus
    ceilings = r.rule.ceilings
    for flavor, gpus in sorted(per_flavor.items(), key=lambda kv: str(kv[0])):
        limit = ceilings.get(flavor, 0) if flavor is not None else max(ceilings.values(), default=0)
        if gpus > limit:
            where = f"on {flavor}" if flavor else "on any flavor"
            return _deny(
                Reason.EXCEEDS_CEILING,
                f"asks for {gpus} GPUs {where}, but {r.rule.unit_path} can never hold "
                f"more than {limit} there (guarantee + burst): it would wait forever; "
                f"ask for at most {limit}, or request a larger quota",
                kind=r.kind,
                unit=r.rule.unit_path,
            )
    return None


def _runtime_s(r: _Review) -> int | None:
    label = r.labels.get(LABEL_MAX_EXEC)
    if label is not None:
        return int(label) if str(label).isdigit() else -1
    deadline = r.obj.get("spec", {}).get("activeDeadlineSeconds")
    return deadline if isinstance(deadline, int) and not isinstance(deadline, bool) else None


def _runtime(r: _Review) -> Decision | None:
    tier = r.rule.tiers[r.labels[LABEL_TIER]]
    if tier.max_runtime_s is None:
        return None
    runtime = _runtime_s(r)
    limit = format_duration(tier.max_runtime_s)
    if runtime is None or runtime <= 0:
        return _deny(
            Reason.RUNTIME_REQUIRED,
            f"tier {tier.name} is limited to {limit}: set spec.activeDeadlineSeconds "
            f"or label {LABEL_MAX_EXEC} (at most {tier.max_runtime_s})",
            kind=r.kind,
            unit=r.rule.unit_path,
        )
    if runtime > tier.max_runtime_s:
        return _deny(
            Reason.RUNTIME_TOO_LONG,
            f"runtime {format_duration(runtime)} is above tier {tier.name}'s limit of "
            f"{limit}: shorten it or use a batch tier",
            kind=r.kind,
            unit=r.rule.unit_path,
        )
    return None


def _opportunistic(r: _Review) -> Decision | None:
    tier = r.rule.tiers[r.labels[LABEL_TIER]]
    if not tier.opportunistic:
        return None
    rule = r.rule
    raw = r.annotations.get(ANNOTATION_CHECKPOINT)
    if raw is None:
        return _deny(
            Reason.CHECKPOINT_REQUIRED,
            f"tier {tier.name} runs on borrowed GPUs and can be reclaimed: "
            f"declare annotation {ANNOTATION_CHECKPOINT} (e.g. "
            f"{format_duration(rule.checkpoint_every_s or 900)})",
            kind=r.kind,
            unit=rule.unit_path,
        )
    try:
        every = parse_duration(raw)
    except DurationError:
        return _deny(
            Reason.CHECKPOINT_REQUIRED,
            f"{ANNOTATION_CHECKPOINT}={raw!r} is not a duration: write e.g. 15m",
            kind=r.kind,
            unit=rule.unit_path,
        )
    if rule.checkpoint_every_s and (every <= 0 or every > rule.checkpoint_every_s):
        return _deny(
            Reason.CHECKPOINT_TOO_SLOW,
            f"checkpoints every {format_duration(every)}, but contract "
            f"{rule.contract} needs at least every "
            f"{format_duration(rule.checkpoint_every_s)}",
            kind=r.kind,
            unit=rule.unit_path,
        )
    if rule.grace_period_s is not None:
        for podset in r.sets:
            grace = podset.spec.get("terminationGracePeriodSeconds")
            if isinstance(grace, int) and grace > rule.grace_period_s:
                return _deny(
                    Reason.GRACE_TOO_LONG,
                    f"{podset.name}: terminationGracePeriodSeconds {grace} is above "
                    f"contract {rule.contract}'s grace period of {rule.grace_period_s}",
                    kind=r.kind,
                    unit=rule.unit_path,
                )
    return None


def _warnings(r: _Review) -> list[str]:
    warnings: list[str] = []
    declared = r.annotations.get(ANNOTATION_GPU_MEMORY)
    need = int(declared) if declared and declared.isdigit() else None
    if need is None:
        return warnings
    memory = {f.name: f.device_memory_gb for f in r.policy.flavors}
    for podset in r.sets:
        flavor = _flavor_of(r, podset)
        if flavor is None or not podset.gpus_per_pod or memory.get(flavor, 0) <= need:
            continue
        smaller = sorted((m, n) for n, m in memory.items() if need <= m < memory[flavor] and r.rule.ceilings.get(n))
        if smaller:
            warnings.append(
                f"{podset.name} pins {flavor} ({memory[flavor]} GB) but needs {need} GB: "
                f"{smaller[0][1]} would do and waits less"[:MAX_WARNING]
            )
    return warnings


# --- mutation -------------------------------------------------------------------------------------


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _set_label(r: _Review, key: str, value: str) -> None:
    if not r.labels and "labels" not in r.obj["metadata"]:
        r.patch.append({"op": "add", "path": "/metadata/labels", "value": {}})
    op = "replace" if key in r.labels else "add"
    r.patch.append({"op": op, "path": f"/metadata/labels/{_escape(key)}", "value": value})
    r.labels[key] = value  # type: ignore[index]


def _mutate(r: _Review) -> None:
    rule = r.rule
    if not r.labels.get(LABEL_TIER) and rule.default_tier:
        _set_label(r, LABEL_TIER, rule.default_tier)
    if r.labels.get(LABEL_QUEUE) is None:
        _set_label(r, LABEL_QUEUE, rule.queue)
    tier = rule.tiers.get(r.labels.get(LABEL_TIER, ""))
    if tier is None:
        return
    if r.labels.get(LABEL_PRIORITY) is None:
        _set_label(r, LABEL_PRIORITY, tier.priority_class)
    if rule.contract and r.labels.get(LABEL_CONTRACT) is None:
        _set_label(r, LABEL_CONTRACT, rule.contract)
    if tier.max_runtime_s is not None and _runtime_s(r) is None:
        _set_label(r, LABEL_MAX_EXEC, str(tier.max_runtime_s))
    if tier.opportunistic and rule.grace_period_s is not None:
        for podset in r.sets:
            op = "replace" if "terminationGracePeriodSeconds" in podset.spec else "add"
            r.patch.append(
                {"op": op, "path": f"{podset.pointer}/terminationGracePeriodSeconds", "value": rule.grace_period_s}
            )
            podset.spec["terminationGracePeriodSeconds"] = rule.grace_period_s  # type: ignore[index]
