"""Admission decisions: validate (allow or deny, with a reason a researcher understands) and mutate
(the JSON patch that fills in what Allot can fill in). Pure and fast: reads only the compiled policy.

Kueue's own machinery is never blocked:
- an object a trusted controller creates with a controller ownerReference (Kueue's Workload for a
  Job, the Job controller's pods, a JobSet's Jobs) is judged as part of its owner, which Allot
  already judged: only its devices are checked (``Reason.OWNED``);
- an UPDATE is refused only for a violation the old object did not already have under today's
  policy, so suspending a job to preempt it, removing a finalizer, relabelling an old object or a
  policy change since creation never blocks a write; anything that matters (labels, resources,
  counts, queue, priority) is still judged;
- mutate adds only what is missing, and only on CREATE (pod templates are immutable afterwards).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotas.policy.labels import GOVERNANCE_LABELS, LABEL_CONTRACT, LABEL_TIER

from .checks import FULL, OWNED, budget_warnings
from .device_checks import fitting_flavors
from .model import ANNOTATION_GPU_MEMORY, LABEL_MAX_EXEC, LABEL_PRIORITY, LABEL_QUEUE, AdmissionPolicy
from .review import (
    KUBERNETES_DEFAULT_GRACE_S,
    MAX_WARNING,
    RUNTIME_FIELDS,
    V1BETA1_WPC_SOURCE,
    WPC_GROUP,
    WPC_KIND,
    Check,
    Decision,
    Reason,
    Review,
)
from .workload import KINDS, OBJECT, FractionalDeviceError, WorkloadError, pod_sets

__all__ = ["MAX_WARNING", "Decision", "Reason", "decide"]

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def decide(policy: AdmissionPolicy, request: Mapping[str, Any], *, mutate: bool = False) -> Decision:
    """Decide on an AdmissionRequest (the ``request`` of an AdmissionReview).

    With ``mutate`` the decision carries the patch that adds what is missing (queue, tier, priority
    class, contract, runtime limit, grace period, governance labels on pod templates); validation
    then judges the object as patched, so both webhooks give the same verdict."""
    try:
        return _decide(policy, request, mutate)
    except FractionalDeviceError as exc:
        kind = str((request.get("kind") or {}).get("kind") or "")
        return _deny(Reason.FRACTIONAL_DEVICE, f"{exc}; {_shares(policy)}", kind=kind)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        return _deny(
            Reason.MALFORMED,
            f"the object is malformed ({type(exc).__name__}: {exc}); check it against its kind's schema",
        )


def _deny(reason: Reason, message: str, *, kind: str = "", unit: str = "") -> Decision:
    return Decision(False, reason, message, (), (), unit, kind)


def _shares(policy: AdmissionPolicy) -> str:
    """What a pod that wants part of a GPU may ask for on this cluster."""
    offered = sorted({(f.name, r) for f in policy.flavors for r in f.profiles})
    if not offered:
        return f"cluster {policy.cluster} offers no shared GPUs (no MIG, MPS or time-sliced flavor): ask for 1"
    said = "; ".join(f"{r} on {name}" for name, r in offered)
    return f"on cluster {policy.cluster} ask for a slice instead ({said}), or for 1 whole GPU"


def _decide(policy: AdmissionPolicy, request: Mapping[str, Any], mutate: bool) -> Decision:
    operation = request.get("operation")
    if operation not in OPERATIONS:
        said = repr(operation) if operation else "missing"
        return _deny(Reason.MALFORMED, f"request.operation is {said}: expected one of {', '.join(OPERATIONS)}")
    if operation in ("DELETE", "CONNECT"):
        return Decision(True, Reason.NOT_CHECKED)
    kind_info = request.get("kind")
    if not isinstance(kind_info, OBJECT) or not kind_info.get("kind"):
        return _deny(Reason.MALFORMED, "request.kind is missing: an AdmissionReview names the kind it sends")
    group, kind = str(kind_info.get("group", "")), str(kind_info.get("kind", ""))
    if (group, kind) not in KINDS:
        return _deny(
            Reason.UNSUPPORTED_KIND,
            f"{group or 'core'}/{kind} is not a kind Allot admits; the webhook configuration should not send it",
            kind=kind,
        )
    namespace = str(request.get("namespace") or "")
    if namespace in policy.exempt_namespaces:
        return Decision(True, Reason.NOT_CHECKED, kind=kind)
    if operation == "UPDATE" and namespace not in policy.namespaces:
        # an object in a namespace no team holds was never Allot's to admit; refusing its updates would
        # only block finalizer removal, status and label writes (the CREATE is where Allot judges)
        return Decision(True, Reason.NOT_CHECKED, kind=kind)
    review = _review(policy, request, "object", group, kind, namespace)
    if isinstance(review, Decision):
        return review
    controller = _by_controller(policy, request, review.obj)
    if operation == "UPDATE":
        old = _review(policy, request, "oldObject", group, kind, namespace)
        if isinstance(old, Decision):
            return (
                old
                if old.reason is not Reason.MALFORMED
                else _deny(Reason.MALFORMED, f"UPDATE without a usable request.oldObject: {old.message}", kind=kind)
            )
        return _judge_update(review, old, OWNED if controller else FULL)
    if controller:
        return _verdict(review, _first(review, OWNED), allowed_as=Reason.OWNED)
    if mutate:
        _mutate(review)
    return _verdict(review, _first(review, FULL), allowed_as=Reason.ALLOWED)


def _review(
    policy: AdmissionPolicy, request: Mapping[str, Any], key: str, group: str, kind: str, namespace: str
) -> Review | Decision:
    obj = request.get(key)
    if not isinstance(obj, OBJECT) or not isinstance(obj.get("metadata"), OBJECT):
        return _deny(Reason.MALFORMED, f"request.{key} is missing or has no metadata", kind=kind)
    rule = policy.namespaces.get(namespace)
    if rule is None:
        return _ungoverned(policy, group, kind, obj, namespace)
    try:
        sets = pod_sets(group, kind, obj)
    except WorkloadError as exc:
        return _deny(Reason.MALFORMED, str(exc), kind=kind, unit=rule.unit_path)
    meta = obj["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for name, values in (("labels", labels), ("annotations", annotations)):
        if not isinstance(values, OBJECT) or not all(isinstance(v, str) for v in values.values()):
            return _deny(
                Reason.MALFORMED, f"metadata.{name} must map strings to strings", kind=kind, unit=rule.unit_path
            )
    return Review(policy, group, kind, obj, rule, sets, dict(labels), dict(annotations))


def _ungoverned(policy: AdmissionPolicy, group: str, kind: str, obj: Mapping[str, Any], namespace: str) -> Decision:
    """A namespace no team holds is not Allot's to govern: what asks for no accelerator (a DaemonSet's pod in
    gpu-operator, monitoring, cert-manager) is never blocked. One that asks for accelerators is refused — or
    admitted with a warning where ``policy.ungoverned_gpu`` is ``allow`` (ALLOT_ADMISSION_UNGOVERNED_GPU)."""
    try:
        sets = pod_sets(group, kind, obj)
        asks = any(
            any(n > 0 for n in podset.devices_per_pod(policy.counted).values()) or podset.ungoverned(policy.counted)
            for podset in sets
        )
    except FractionalDeviceError:
        asks = True
    except WorkloadError as exc:  # cannot tell what it asks for (the API server validates built-in kinds first)
        return _deny(Reason.MALFORMED, str(exc), kind=kind)
    if not asks:
        return Decision(True, Reason.NOT_CHECKED, f"namespace {namespace!r} is not governed by Allot", kind=kind)
    message = (
        f"namespace {namespace!r} is not bound to any team on cluster {policy.cluster}, and this {kind} asks "
        f"for GPUs: ask a platform admin to bind the namespace to its team in Allot"
    )
    if policy.ungoverned_gpu == "allow":
        return Decision(True, Reason.NOT_CHECKED, message, warnings=(_short(message),), kind=kind)
    return _deny(Reason.NAMESPACE_UNBOUND, message, kind=kind)


def _short(text: str) -> str:
    return text if len(text) <= MAX_WARNING else text[: MAX_WARNING - 1] + "…"


def _by_controller(policy: AdmissionPolicy, request: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """A trusted controller writing an object it controls on behalf of an owner Allot judged."""
    user = request.get("userInfo")
    username = user.get("username") if isinstance(user, OBJECT) else None
    if username not in policy.controllers:
        return False
    refs = obj["metadata"].get("ownerReferences") or []
    return isinstance(refs, list) and any(
        isinstance(ref, OBJECT) and ref.get("controller") is True and _judged(ref) for ref in refs
    )


def _judged(ref: Mapping[str, Any]) -> bool:
    """Being owned counts only when the owner is a kind Allot judges (a Job, a JobSet, …): a trusted
    controller's ReplicaSet, StatefulSet, CronJob or custom resource was never judged, so its pods
    are judged in full."""
    group = str(ref.get("apiVersion") or "").rpartition("/")[0]
    return (group, str(ref.get("kind") or "")) in KINDS


def _run(review: Review, checks: tuple[Any, ...]) -> list[Decision]:
    return [denial for check in checks for denial in check(review)]


def _first(review: Review, checks: tuple[Check, ...]) -> Decision | None:
    """The first denial of the checks in order, without running the checks after it (a CREATE's answer is
    its first denial; an UPDATE compares whole lists, :func:`_judge_update`)."""
    for check in checks:
        denials = check(review)
        if denials:
            return denials[0]
    return None


def _verdict(review: Review, denial: Decision | None, *, allowed_as: Reason) -> Decision:
    if denial is not None:
        return denial
    return Decision(
        True, allowed_as, "", tuple(_warnings(review)), tuple(review.patch), review.rule.unit_path, review.kind
    )


def _judge_update(new: Review, old: Review, checks: tuple[Any, ...]) -> Decision:
    """Refuse an UPDATE only for what it introduces: a denial (rule and numbers) the old object, judged
    by today's policy, does not have."""
    before = {d.message for d in _run(old, checks)}
    denials = _run(new, checks)
    introduced = [d for d in denials if d.message not in before]
    if introduced:
        return introduced[0]
    reason = Reason.UNCHANGED if denials else (Reason.OWNED if checks is OWNED else Reason.ALLOWED)
    return Decision(True, reason, "", (), (), new.rule.unit_path, new.kind)


def _warnings(r: Review) -> list[str]:
    warnings = budget_warnings(r)
    declared = r.annotations.get(ANNOTATION_GPU_MEMORY)
    need = int(declared) if declared and declared.isdigit() else None
    if need is None:
        return warnings
    memory = {f.name: f.device_memory_gb for f in r.policy.flavors}
    for podset in r.sets:
        fitting = fitting_flavors(r, podset)
        flavor = fitting[0] if fitting and len(fitting) == 1 else None
        if flavor is None or not podset.gpus_per_pod or memory.get(flavor, 0) <= need:
            continue
        smaller = sorted((m, n) for n, m in memory.items() if need <= m < memory[flavor] and r.rule.ceilings.get(n))
        if smaller:
            warnings.append(
                f"{podset.name} pins {flavor} ({memory[flavor]} GB) but needs {need} GB: "
                f"{smaller[0][1]} would do and waits less"[:MAX_WARNING]
            )
    return warnings


# --- mutation (CREATE only; adds, never replaces) --------------------------------------------------


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _add_labels(r: Review, base: str, current: Mapping[str, Any] | None, wanted: Mapping[str, str]) -> None:
    """Add the ``wanted`` labels missing at ``base`` (a JSON pointer to an object's metadata parent)."""
    missing = {k: v for k, v in wanted.items() if not (current or {}).get(k)}
    if not missing:
        return
    if current is None:
        r.patch.append({"op": "add", "path": f"{base}/metadata/labels", "value": dict(missing)})
        return
    for key, value in missing.items():
        op = "replace" if key in current else "add"
        r.patch.append({"op": op, "path": f"{base}/metadata/labels/{_escape(key)}", "value": value})


def _set_label(r: Review, key: str, value: str) -> None:
    has_map = isinstance(r.obj["metadata"].get("labels"), Mapping) or any(
        p["path"] == "/metadata/labels" for p in r.patch
    )
    if not has_map:
        r.patch.append({"op": "add", "path": "/metadata/labels", "value": {}})
    op = "replace" if key in r.labels else "add"
    r.patch.append({"op": op, "path": f"/metadata/labels/{_escape(key)}", "value": value})
    r.labels[key] = value


def _set_spec(r: Review, key: str, value: Any) -> None:
    r.patch.append({"op": "add", "path": f"/spec/{key}", "value": value})
    r.spec[key] = value  # type: ignore[index]


def _mutate(r: Review) -> None:
    _pin_slices(r)
    rule = r.rule
    wanted_tier = r.tier_name() or rule.default_tier
    if not r.labels.get(LABEL_TIER) and wanted_tier:
        _set_label(r, LABEL_TIER, wanted_tier)
    if r.queue() is None:
        if r.is_workload:
            _set_spec(r, "queueName", rule.queue)
        else:
            _set_label(r, LABEL_QUEUE, rule.queue)
    tier = r.tier()
    if tier is None:
        return
    if r.priority_class() is None:
        if r.is_v1beta1_workload:
            _set_spec(r, "priorityClassName", tier.priority_class)
            _set_spec(r, "priorityClassSource", V1BETA1_WPC_SOURCE)
        elif r.is_workload:
            _set_spec(r, "priorityClassRef", {"group": WPC_GROUP, "kind": WPC_KIND, "name": tier.priority_class})
        if r.is_workload and r.spec.get("priority") is None:
            # Kueue's CRD (both versions): "priority should not be nil when priorityClassName/Ref is set"; Kueue
            # copies the class's value there for the Workloads it makes, and so does Allot for one it completes
            _set_spec(r, "priority", tier.priority)
        else:
            _set_label(r, LABEL_PRIORITY, tier.priority_class)
    if rule.contract and not r.labels.get(LABEL_CONTRACT):
        _set_label(r, LABEL_CONTRACT, rule.contract)
    if tier.max_runtime_s is not None and r.runtime_s() is None:
        if r.is_workload:
            _set_spec(r, RUNTIME_FIELDS["Workload"].split(".")[1], tier.max_runtime_s)
        else:
            _set_label(r, LABEL_MAX_EXEC, str(tier.max_runtime_s))
    if tier.opportunistic and rule.grace_period_s is not None:
        for podset in r.sets:
            current = podset.spec.get("terminationGracePeriodSeconds")
            if current is None or current == KUBERNETES_DEFAULT_GRACE_S:  # unset, or the API server's default
                if current == rule.grace_period_s:
                    continue
                r.patch.append(
                    {
                        "op": "add" if current is None else "replace",
                        "path": f"{podset.pointer}/terminationGracePeriodSeconds",
                        "value": rule.grace_period_s,
                    }
                )
                podset.spec["terminationGracePeriodSeconds"] = rule.grace_period_s  # type: ignore[index]
    if r.kind != "Pod":
        wanted = {k: r.labels[k] for k in GOVERNANCE_LABELS if r.labels.get(k)}
        for podset in r.sets:
            _template_labels(r, podset.template_pointer, wanted)


def _pin_slices(r: Review) -> None:
    """A pod set asking for the slices of one shared flavor, pinned nowhere, gets that flavor's node labels as
    its node selector. Kueue counts every shared flavor's slices in one currency (quotas.policy.sharing.EQUIVALENTS), so
    unpinned it could assign a time-sliced share to a MIG flavor whose nodes offer no such share."""
    counted, weights = r.policy.counted, r.policy.weights
    labels = {f.name: f.node_labels for f in r.policy.flavors}
    for podset in r.sets:
        asked = {counted[n] for n in podset.held_per_pod(weights)}
        if len(asked) != 1 or None in asked or fitting_flavors(r, podset) is not None:
            continue
        if any(counted[n] is None and n not in weights for n in podset.held_per_pod(counted)):
            continue  # whole GPUs beside the slices: no flavor offers both, and the validating webhook says so
        wanted = dict(labels.get(str(next(iter(asked))), {}))
        selector = podset.spec.get("nodeSelector")
        if not isinstance(selector, Mapping):
            if wanted:
                r.patch.append({"op": "add", "path": f"{podset.pointer}/nodeSelector", "value": wanted})
                podset.spec["nodeSelector"] = wanted  # type: ignore[index]
            continue
        for key, value in sorted(wanted.items()):
            if key not in selector:
                r.patch.append({"op": "add", "path": f"{podset.pointer}/nodeSelector/{_escape(key)}", "value": value})
                selector[key] = value  # type: ignore[index]


def _template_labels(r: Review, pointer: str, wanted: Mapping[str, str]) -> None:
    """Copy the governance labels into a pod template, so the pods its controller creates carry them."""
    template: Any = r.obj
    for part in pointer.strip("/").split("/"):
        template = template[int(part)] if isinstance(template, list) else template[part.replace("~1", "/")]
    meta = template.get("metadata")
    if not isinstance(meta, Mapping):
        if wanted:
            r.patch.append({"op": "add", "path": f"{pointer}/metadata", "value": {"labels": dict(wanted)}})
        return
    labels = meta.get("labels")
    _add_labels(r, pointer, labels if isinstance(labels, Mapping) else None, wanted)
