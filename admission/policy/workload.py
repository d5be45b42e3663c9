"""What a workload asks for: its pod templates, how many pods each, where they may land.

Kinds: core/v1 Pod, batch/v1 Job, JobSet, Kubeflow PyTorchJob, RayJob and Kueue Workload. Each pod
set carries the JSON pointer of its pod spec, so the mutating webhook can patch it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from quotas.policy.quantity import QuantityError, Resource, parse_quantity

GPU = "nvidia.com/gpu"
KINDS = {
    ("", "Pod"),
    ("batch", "Job"),
    ("jobset.x-k8s.io", "JobSet"),
    ("kubeflow.org", "PyTorchJob"),
    ("ray.io", "RayJob"),
    ("kueue.x-k8s.io", "Workload"),
}


class WorkloadError(ValueError):
    """The object is not a workload of its declared kind (a field is missing or malformed)."""


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    spec: Mapping[str, Any]
    pointer: str
    """JSON pointer of the pod spec inside the object, e.g. ``/spec/template/spec``."""

    @property
    def gpus_per_pod(self) -> int:
        """Effective GPU request of one pod: max(Σ containers, largest init container); a limit
        counts when it exceeds the request (for extended resources they must be equal)."""

        def of(container: Mapping[str, Any]) -> int:
            resources = container.get("resources") or {}
            values = [(resources.get(part) or {}).get(GPU) for part in ("requests", "limits")]
            try:
                return max((parse_quantity(Resource.GPU, v) for v in values if v is not None), default=0)
            except QuantityError as exc:
                raise WorkloadError(f"container {container.get('name', '?')}: {GPU} {exc.message}") from exc

        main = sum(of(c) for c in self.spec.get("containers") or [])
        init = max((of(c) for c in self.spec.get("initContainers") or []), default=0)
        return max(main, init)


def pod_sets(group: str, kind: str, obj: Mapping[str, Any]) -> list[PodSet]:
    """The pod sets of a workload. Raises WorkloadError when the shape is wrong."""
    try:
        found = list(_pod_sets(group, kind, obj))
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise WorkloadError(f"{kind} is malformed: {exc!r} is missing or of the wrong type") from exc
    for podset in found:
        containers = podset.spec.get("containers") if isinstance(podset.spec, Mapping) else None
        if (
            not isinstance(containers, list)
            or not all(isinstance(c, Mapping) for c in containers)
            or not all(isinstance(c, Mapping) for c in podset.spec.get("initContainers") or [])
        ):
            raise WorkloadError(f"{kind} {podset.name}: the pod spec needs a list of containers")
    return found


def _count(value: Any, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WorkloadError(f"replica count {value!r} is not a non-negative integer")
    return value


def _pod_sets(group: str, kind: str, obj: Mapping[str, Any]) -> Iterator[PodSet]:
    spec = obj["spec"]
    if kind == "Pod":
        yield PodSet("pod", 1, spec, "/spec")
    elif kind == "Job":
        yield PodSet("job", _count(spec.get("parallelism")), spec["template"]["spec"], "/spec/template/spec")
    elif kind == "JobSet":
        for i, rj in enumerate(spec["replicatedJobs"]):
            job = rj["template"]["spec"]
            yield PodSet(
                rj.get("name", str(i)),
                _count(rj.get("replicas")) * _count(job.get("parallelism")),
                job["template"]["spec"],
                f"/spec/replicatedJobs/{i}/template/spec/template/spec",
            )
    elif kind == "PyTorchJob":
        for role, rs in sorted(spec["pytorchReplicaSpecs"].items()):
            yield PodSet(
                role,
                _count(rs.get("replicas")),
                rs["template"]["spec"],
                f"/spec/pytorchReplicaSpecs/{role}/template/spec",
            )
    elif kind == "RayJob":
        cluster = spec["rayClusterSpec"]
        yield PodSet(
            "head", 1, cluster["headGroupSpec"]["template"]["spec"], "/spec/rayClusterSpec/headGroupSpec/template/spec"
        )
        for i, group_spec in enumerate(cluster.get("workerGroupSpecs") or []):
            yield PodSet(
                group_spec.get("groupName", str(i)),
                _count(group_spec.get("replicas")),
                group_spec["template"]["spec"],
                f"/spec/rayClusterSpec/workerGroupSpecs/{i}/template/spec",
            )
    elif kind == "Workload":
        for i, ps in enumerate(spec["podSets"]):
            yield PodSet(
                ps.get("name", str(i)),
                _count(ps.get("count")),
                ps["template"]["spec"],
                f"/spec/podSets/{i}/template/spec",
            )
    else:
        raise WorkloadError(f"{group or 'core'}/{kind} is not a workload kind Allot checks")


def selected_labels(spec: Mapping[str, Any]) -> dict[str, set[str]]:
    """Node labels a pod spec requires: nodeSelector plus required node affinity (In / single value)."""
    required: dict[str, set[str]] = {k: {str(v)} for k, v in (spec.get("nodeSelector") or {}).items()}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In" and expr.get("values"):
                required.setdefault(expr["key"], set()).update(str(v) for v in expr["values"])
    return required
