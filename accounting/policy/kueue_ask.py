"""What a Kueue Workload asks for while it waits, and what Kueue says of the wait: read from each
observation the usage watcher folds (accounting.policy.kueue.observe), kept with the track, and read by
the waiting explanation (accounting.policy.waiting). Pure: a Workload dict in, an ``Ask`` out.

Kueue sums a pod set's containers' requests per pod (``spec.podSets[].template``) times its ``count``;
while it waits its ``QuotaReserved`` condition is False with one representative reason (``Pending``…) and
a message such as "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in
flavor a100, 4 more needed"; ``status.admissionChecks`` lists the checks still ``Pending`` or ``Retry``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from accounting.policy.equivalents import pod_slices
from quotas.policy.quantity import parse_decimal_quantity


@dataclass(frozen=True)
class Ask:
    pods: int = 0
    """Pods of the pod sets that ask for accelerators."""
    per_pod: int = 0
    """The most devices one of those pods asks for (a gang needs this much free on each of its nodes)."""
    devices: int = 0
    flavor: str = ""
    """The flavor its accelerator resource is mapped to (ALLOT_ACCELERATORS), else empty: any flavor."""
    placement: Mapping[str, Any] = field(default_factory=dict)
    """The node selector and required node affinity of its first accelerator pod set."""
    job: str = ""
    """``Kind/name`` of the job the Workload was made for (its controller ownerReference)."""
    reason: str = ""
    message: str = ""
    since: datetime | None = None
    """Kueue's QuotaReserved=False reason, message and time while it waits."""
    checks: tuple[str, ...] = ()
    """Admission checks still Pending or Retry."""
    slices: Mapping[str, int] = field(default_factory=dict)
    """Slices of a shared flavor it asks for in all, per resource (``nvidia.com/mig-1g.10gb`` → 7)."""


def _per_pod(template: Mapping[str, Any], accelerators: Mapping[str, str | None]) -> tuple[int, str]:
    spec = template.get("spec") or {}
    total, flavor = 0, ""
    for container in spec.get("containers") or []:
        requests = ((container or {}).get("resources") or {}).get("requests") or {}
        limits = ((container or {}).get("resources") or {}).get("limits") or {}
        for resource in accelerators:
            raw = requests.get(resource, limits.get(resource))
            if raw is None:
                continue
            try:
                amount = int(parse_decimal_quantity(str(raw)))
            except ValueError:
                continue
            total += amount
            flavor = flavor or (accelerators[resource] or "") if amount else flavor
    return total, flavor


def ask_of(obj: Mapping[str, Any], accelerators: Mapping[str, str | None], *, at: datetime | None = None) -> Ask:
    """The Workload's ask and Kueue's word on its wait (``at``: the QuotaReserved condition's time)."""
    spec = obj.get("spec") or {}
    pods = per_pod = devices = 0
    flavor, placement = "", dict[str, Any]()
    slices: dict[str, int] = {}
    for podset in spec.get("podSets") or []:
        if not isinstance(podset, Mapping):
            continue
        template = podset.get("template") or {}
        count = podset.get("count")
        count = count if isinstance(count, int) and count > 0 else 1
        for resource, k in pod_slices(template.get("spec") or {}).items():
            slices[resource] = slices.get(resource, 0) + count * k
        n, mapped = _per_pod(template, accelerators)
        if not n:
            continue
        pods, devices, per_pod = pods + count, devices + count * n, max(per_pod, n)
        flavor = flavor or mapped
        if not placement:
            pod = template.get("spec") or {}
            placement = {k: pod[k] for k in ("nodeSelector", "affinity") if pod.get(k)}
    status = obj.get("status") or {}
    reason = message = ""
    for raw in status.get("conditions") or []:
        if isinstance(raw, Mapping) and raw.get("type") == "QuotaReserved" and str(raw.get("status")) != "True":
            reason, message = str(raw.get("reason") or ""), str(raw.get("message") or "")
    checks = tuple(
        str(c.get("name") or "")
        for c in status.get("admissionChecks") or []
        if isinstance(c, Mapping) and c.get("state") in ("Pending", "Retry")
    )
    job = ""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("name"):
            job = f"{ref.get('kind') or ''}/{ref['name']}"
    return Ask(pods, per_pod, devices, flavor, placement, job, reason, message, at if reason else None, checks, slices)


def ask_to_json(ask: Ask) -> dict[str, Any]:
    return {
        "pods": ask.pods,
        "per_pod": ask.per_pod,
        "devices": ask.devices,
        "flavor": ask.flavor,
        "placement": dict(ask.placement),
        "job": ask.job,
        "reason": ask.reason,
        "message": ask.message,
        "since": ask.since.isoformat() if ask.since else None,
        "checks": list(ask.checks),
        **({"slices": dict(ask.slices)} if ask.slices else {}),
    }


def ask_from_json(data: Mapping[str, Any] | None) -> Ask:
    if not data:
        return Ask()
    since = data.get("since")
    return Ask(
        pods=int(data.get("pods") or 0),
        per_pod=int(data.get("per_pod") or 0),
        devices=int(data.get("devices") or 0),
        flavor=str(data.get("flavor") or ""),
        placement=dict(data.get("placement") or {}),
        job=str(data.get("job") or ""),
        reason=str(data.get("reason") or ""),
        message=str(data.get("message") or ""),
        since=datetime.fromisoformat(since) if isinstance(since, str) and since else None,
        checks=tuple(str(c) for c in data.get("checks") or []),
        slices={str(k): int(v) for k, v in (data.get("slices") or {}).items()},
    )
