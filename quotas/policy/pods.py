"""What one pod holds at its peak, as Kubernetes counts it: the effective-request rule, shared by the admission
webhook (which judges a pod template before it runs) and the usage sources (which weigh a Kueue Workload's slices).

A pod holds the larger of its app containers plus its sidecars (init containers with ``restartPolicy: Always``,
which keep running) and, for each plain init container in turn, that container plus the sidecars started before
it (https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/#resource-sharing-within-containers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Amount = Callable[[Mapping[str, Any], str], int]
"""One container's request of one resource (how to read and check a quantity is the caller's)."""


def named(spec: Mapping[str, Any]) -> set[str]:
    """Every resource name a pod spec's containers request or limit. Raises AttributeError where a container or
    its ``resources`` is not an object (the caller says malformed)."""
    found: set[str] = set()
    for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        requested = container.get("resources") or {}
        for part in (requested.get("requests"), requested.get("limits")):
            if part:
                found.update(part.keys())
    return found


def peak(spec: Mapping[str, Any], names: Iterable[str], amount: Amount) -> dict[str, int]:
    """Per resource of ``names`` that the pod asks for: what one pod of ``spec`` holds at its peak (above);
    a resource no container names is not read at all."""
    inits, apps = spec.get("initContainers") or [], spec.get("containers") or []
    present = named(spec)
    held: dict[str, int] = {}
    for name in names:
        if name not in present:
            continue
        sidecars, init_peak = 0, 0
        for container in inits:
            asked = amount(container, name)
            if container.get("restartPolicy") == "Always":
                sidecars += asked
            else:
                init_peak = max(init_peak, asked + sidecars)
        total = max(init_peak, sum(amount(c, name) for c in apps) + sidecars)
        if total:
            held[name] = total
    return held
