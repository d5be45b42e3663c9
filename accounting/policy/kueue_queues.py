"""A ClusterQueue's status as Kueue reports it (issue #44.1): what each flavor's GPUs are used and borrowed,
and how many Workloads are pending, reserving and admitted — read from ``status.flavorsUsage`` and the
counts Kueue keeps (``pendingWorkloads``, ``reservingWorkloads``, ``admittedWorkloads``). Pure: a
ClusterQueue object in, a ``QueueStatus`` out, and its JSON form for the shared cache."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from quotas.policy.quantity import Resource, parse_quantity


@dataclass(frozen=True)
class QueueStatus:
    name: str
    cohort: str
    pending: int
    reserving: int
    admitted: int
    gpus: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Flavor name → (GPUs used, of them borrowed), as Kueue counts them."""

    def said(self, prefix: str = "") -> str:
        """One line in Kueue's own figures; each flavor named ``prefix`` + its name (``cluster/`` for its key)."""
        used = ", ".join(
            f"{prefix}{f} {u} used" + (f" ({b} borrowed)" if b else "") for f, (u, b) in sorted(self.gpus.items()) if u
        )
        return (
            f"Kueue: ClusterQueue {self.name} — {used or 'no GPUs used'}; {self.pending} pending, "
            f"{self.admitted} admitted"
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def queue_status(obj: Mapping[str, Any]) -> QueueStatus:
    """A ClusterQueue as the API server serves it (v1beta1 or v1beta2: the status fields are the same)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    gpus: dict[str, tuple[int, int]] = {}
    for usage in status.get("flavorsUsage") or []:
        for resource in usage.get("resources") or []:
            if resource.get("name") != Resource.GPU.value:
                continue
            try:
                total = parse_quantity(Resource.GPU, str(resource.get("total", "0")))
                borrowed = parse_quantity(Resource.GPU, str(resource.get("borrowed", "0")))
            except ValueError:
                continue
            gpus[str(usage.get("name") or "")] = (total, borrowed)
    return QueueStatus(
        str(meta.get("name") or ""),
        str(spec.get("cohortName") or spec.get("cohort") or ""),
        _count(status.get("pendingWorkloads")),
        _count(status.get("reservingWorkloads")),
        _count(status.get("admittedWorkloads")),
        gpus,
    )


def to_json(status: QueueStatus) -> dict[str, Any]:
    return {**asdict(status), "gpus": {f: list(v) for f, v in status.gpus.items()}}


def from_json(data: Mapping[str, Any]) -> QueueStatus:
    return QueueStatus(
        str(data.get("name", "")),
        str(data.get("cohort", "")),
        _count(data.get("pending")),
        _count(data.get("reserving")),
        _count(data.get("admitted")),
        {str(f): (int(v[0]), int(v[1])) for f, v in (data.get("gpus") or {}).items()},
    )
