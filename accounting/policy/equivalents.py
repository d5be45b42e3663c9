"""What a workload on a shared flavor holds, in GPU-equivalents (quotas.policy.sharing): the same figure
whichever scheduler or telemetry said it. Pure.

Each source counts slices its own way — a Kueue Workload's pod sets ask for ``nvidia.com/mig-1g.10gb``
(Kueue's own usage is the transformed currency, millionths rounded down per slice), sacct's AllocTRES has
``gres/gpu:h100-mig_1g.10gb=7``, dcgm-exporter has one series per MIG instance labelled ``GPU_I_PROFILE`` —
so Allot counts the slices and weighs them itself, with the flavor's exact weights (seven 1g.10gb slices
of an H100 are 1 GPU-equivalent on every path, not 0.999999 on Kueue's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quotas.policy import pods
from quotas.policy.sharing import MIG_PREFIX, SHARED_GPU, FlavorSharing, equivalents


def is_slice(resource: str) -> bool:
    """A resource a shared flavor offers: a MIG profile or a shared GPU (MPS, time-slicing)."""
    return resource.startswith(MIG_PREFIX) or resource == SHARED_GPU


def pod_slices(spec: Mapping[str, Any]) -> dict[str, int]:
    """Slices one pod of a pod template's spec asks for, per resource, at its peak as Kubernetes counts it
    (quotas.policy.pods, the rule admission judges by: app containers plus sidecars, or an init container plus
    the sidecars started before it); a request, else the limit (the API server defaults an extended resource's
    request to its limit). A count that is not a whole number is not a slice the scheduler gave."""
    return pods.peak(spec, sorted(r for r in pods.named(spec) if is_slice(str(r))), _asked)


def _asked(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get(resource, (resources.get("limits") or {}).get(resource))
    return int(str(value)) if value is not None and str(value).isdigit() else 0


def workload_slices(obj: Mapping[str, Any]) -> dict[str, int]:
    """Slices a Kueue Workload's pod sets ask for in all, per resource (each pod set's count × one pod's)."""
    found: dict[str, int] = {}
    for pod_set in (obj.get("spec") or {}).get("podSets") or []:
        count = pod_set.get("count")
        pods = count if isinstance(count, int) and count > 0 else 1
        for resource, n in pod_slices(((pod_set.get("template") or {}).get("spec")) or {}).items():
            found[resource] = found.get(resource, 0) + pods * n
    return found


def held(slices: Mapping[str, object], sharing: FlavorSharing) -> float | None:
    """GPU-equivalents of ``slices`` (resource → count; other keys ignored) on a flavor shared as ``sharing``:
    None on a whole flavor (its devices are what it holds)."""
    if not sharing.shared:
        return None
    counts = {resource: int(str(n)) for resource, n in slices.items() if is_slice(resource) and str(n).isdigit()}
    return float(equivalents(counts, sharing.weights()))  # a resource the flavor does not offer weighs 0


def share(equivalents: float | None, devices: int, part: int) -> float | None:
    """What ``part`` of a workload's ``devices`` (slices) weighs, when all of them weigh ``equivalents``."""
    if equivalents is None or devices <= 0:
        return None
    return equivalents * part / devices
