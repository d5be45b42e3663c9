"""What a workload asks for: its pod templates, how many pods each may run at once, where they may land.

Kinds: core/v1 Pod, batch/v1 Job, JobSet, Kubeflow PyTorchJob, MPIJob and TFJob, RayJob, RayCluster,
LeaderWorkerSet and Kueue Workload (each one Kueue makes Workloads for, so that the Workload Kueue creates is
judged as part of a job Allot already judged, whose labels the mutating webhook could complete). Each pod
set carries the JSON pointer of its pod template, so the mutating webhook can patch it. Counts are
the most the workload may ever hold at once: a Job runs min(parallelism, completions) pods, a Ray
worker group replicas × numOfHosts (up to maxReplicas when it autoscales), an elastic PyTorchJob up
to ``elasticPolicy.maxReplicas`` workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from quotas.policy import pods
from quotas.policy.placement import node_requirements
from quotas.policy.quantity import MAX_QUANTITY, QuantityError, Resource, parse_quantity

GPU = "nvidia.com/gpu"
KINDS = {
    ("", "Pod"),
    ("batch", "Job"),
    ("jobset.x-k8s.io", "JobSet"),
    ("kubeflow.org", "PyTorchJob"),
    ("kubeflow.org", "MPIJob"),
    ("kubeflow.org", "TFJob"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    ("ray.io", "RayJob"),
    ("ray.io", "RayCluster"),  # judged too, so the chain RayJob → RayCluster → Pods is judged once, at the RayJob
    ("kueue.x-k8s.io", "Workload"),
}
ACCELERATOR_PREFIXES = (
    "nvidia.com/",
    "amd.com/",
    "gpu.intel.com/",
    "habana.ai/",
    "aws.amazon.com/neuron",
    "google.com/tpu",
)
"""Extended resources that are accelerators: counted when mapped to a flavor, refused otherwise."""
DRA = "resource claims (DRA)"
"""What a pod asking for devices through Dynamic Resource Allocation (``resourceClaims``) is called in answers."""


OBJECT = (dict, Mapping)
"""``isinstance(value, OBJECT)``: a JSON object. A dict (what ``json.loads`` makes) is told at once; the abstract
Mapping's own check, ten times slower, only runs for anything else (issue #40.6: every review makes hundreds)."""


class WorkloadError(ValueError):
    """The object is not a workload of its declared kind (a field is missing or malformed)."""


class FractionalDeviceError(WorkloadError):
    """A container asks for part of a device (``500m``): a valid quantity, but not a whole device."""


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    spec: Mapping[str, Any]
    pointer: str
    """JSON pointer of the pod spec inside the object, e.g. ``/spec/template/spec``."""

    @property
    def template_pointer(self) -> str:
        """JSON pointer of the pod template (its ``metadata`` sits beside ``spec``); the object itself
        for a Pod."""
        return self.pointer.removesuffix("/spec") if self.pointer != "/spec" else ""

    def devices_per_pod(self, resources: Mapping[str, str | None]) -> dict[str | None, int]:
        """Devices one pod holds at its peak, per flavor (None: any flavor); ``resources`` maps counted
        resource names to their flavor (:meth:`held_per_pod` for the rule)."""
        peak: dict[str | None, int] = {}
        for name, total in self.held_per_pod(resources).items():
            peak[resources[name]] = peak.get(resources[name], 0) + total
        return peak

    def held_per_pod(self, resources: Iterable[str]) -> dict[str, int]:
        """Per resource name asked for: what one pod holds at its peak, under Kubernetes' effective-request
        rule (quotas.policy.pods: app containers plus sidecars, or an init container plus the sidecars before it)."""
        return pods.peak(self.spec, resources, _amount)

    @property
    def gpus_per_pod(self) -> int:
        """``nvidia.com/gpu`` per pod at its peak (the effective-request rule above)."""
        return self.devices_per_pod({GPU: None}).get(None, 0)

    def ungoverned(self, resources: Mapping[str, str | None]) -> list[str]:
        """Accelerator resources and DRA claims this pod asks for that Allot does not count."""
        found: set[str] = set()
        for container in [*(self.spec.get("initContainers") or []), *(self.spec.get("containers") or [])]:
            requested = container.get("resources") or {}
            for part in ("requests", "limits"):
                for name, value in (requested.get(part) or {}).items():
                    if name not in resources and str(name).startswith(ACCELERATOR_PREFIXES) and _nonzero(value):
                        found.add(str(name))
            if requested.get("claims"):
                found.add(DRA)
        if self.spec.get("resourceClaims"):
            found.add(DRA)
        return sorted(found)


def _amount(container: Mapping[str, Any], name: str) -> int:
    """A container's request of one extended resource; a limit counts when larger (for extended
    resources Kubernetes requires them equal)."""
    resources = container.get("resources") or {}
    values = [(resources.get(part) or {}).get(name) for part in ("requests", "limits")]
    try:
        return max((devices(v) for v in values if v is not None), default=0)
    except QuantityError as exc:
        where = f"container {container.get('name', '?')}"
        if "whole number" in exc.message:
            raise FractionalDeviceError(
                f"{where} asks for {name} {exc.raw!r}: Allot counts whole devices — a share of a GPU is asked as "
                f"a slice resource of a flavor that offers one, never as a fraction of {name}"
            ) from exc
        raise WorkloadError(f"{where}: {name} {exc.message}") from exc


def devices(raw: object) -> int:
    """A device count in any Kubernetes quantity form that is a whole number: ``4``, ``"4"``, and the
    ``"4000m"`` a CRD (a Kueue Workload) keeps as written, which Kueue reads as 4. A fraction of a
    device (``"1500m"``) is refused."""
    if type(raw) is str and raw.isascii() and raw.isdigit() and len(raw) < 10:  # "2": the usual form, read at once
        return int(raw)
    if type(raw) is int and 0 <= raw <= MAX_QUANTITY:
        return raw
    try:
        return parse_quantity(Resource.GPU, raw)
    except QuantityError as first:
        try:
            milli = parse_quantity(Resource.CPU, raw)  # millis are CPU's base unit
        except QuantityError:
            raise first from None
        if milli % 1000:
            raise QuantityError(
                Resource.GPU, raw, f"{raw!r} is not a whole number of devices", "use e.g. 1 or 4"
            ) from None
        return milli // 1000


def _nonzero(value: object) -> bool:
    try:
        return devices(value) > 0
    except QuantityError:
        return True  # malformed: say so as an accelerator Allot does not count


def pod_sets(group: str, kind: str, obj: Mapping[str, Any]) -> list[PodSet]:
    """The pod sets of a workload. Raises WorkloadError naming the missing or malformed field."""
    try:
        found = list(_pod_sets(group, kind, obj))
    except (TypeError, AttributeError, IndexError) as exc:
        raise WorkloadError(f"{kind} is malformed ({exc}): check it against the {kind} schema") from exc
    for podset in found:
        containers = podset.spec.get("containers") if isinstance(podset.spec, OBJECT) else None
        if (
            not isinstance(containers, list)
            or not all(isinstance(c, OBJECT) for c in containers)
            or not isinstance(podset.spec.get("initContainers") or [], list)
            or not all(isinstance(c, OBJECT) for c in podset.spec.get("initContainers") or [])
        ):
            raise WorkloadError(f"{kind} {podset.name}: the pod spec needs a list of containers")
    return found


def _at(obj: Any, kind: str, path: str, within: str = "") -> Any:
    """The value at a dotted path (below ``within``, the path of ``obj`` itself), or a WorkloadError
    that names the full path."""
    value = obj
    walked = [within] if within else []
    for part in path.split("."):
        walked.append(part)
        if not isinstance(value, OBJECT) or value.get(part) is None:
            raise WorkloadError(f"{kind}: {'.'.join(walked)} is missing or not an object")
        value = value[part]
    return value


def _list(obj: Mapping[str, Any], kind: str, path: str) -> list[Any]:
    value = _at(obj, kind, path)
    if not isinstance(value, list):
        raise WorkloadError(f"{kind}: {path} must be a list")
    return value


def _count(value: Any, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WorkloadError(f"replica count {value!r} is not a non-negative integer")
    return value


def _job_pods(job_spec: Mapping[str, Any]) -> int:
    """Pods a Job runs at once: min(parallelism, completions); parallelism defaults to 1 and
    completions, when unset, does not bound it."""
    parallelism = _count(job_spec.get("parallelism"))
    completions = job_spec.get("completions")
    return parallelism if completions is None else min(parallelism, _count(completions))


def _ray_workers(group_spec: Mapping[str, Any], autoscaling: bool) -> int:
    """Worker pods of a Ray group at its largest: replicas (or minReplicas, when above), up to
    maxReplicas when the cluster autoscales, times numOfHosts (multi-host workers)."""
    replicas = max(_count(group_spec.get("replicas")), _count(group_spec.get("minReplicas"), 0))
    if autoscaling:
        replicas = max(replicas, _count(group_spec.get("maxReplicas"), 0))
    return replicas * _count(group_spec.get("numOfHosts"))


def _pod_sets(group: str, kind: str, obj: Mapping[str, Any]) -> Iterator[PodSet]:
    if kind == "Pod":
        yield PodSet("pod", 1, _at(obj, kind, "spec"), "/spec")
    elif kind == "Job":
        spec = _at(obj, kind, "spec")
        yield PodSet("job", _job_pods(spec), _at(spec, kind, "template.spec", "spec"), "/spec/template/spec")
    elif kind == "JobSet":
        for i, rj in enumerate(_list(obj, kind, "spec.replicatedJobs")):
            job = _at(rj, kind, "template.spec", f"spec.replicatedJobs[{i}]")
            yield PodSet(
                rj.get("name", str(i)),
                _count(rj.get("replicas")) * _job_pods(job),
                _at(job, kind, "template.spec", f"spec.replicatedJobs[{i}].template.spec"),
                f"/spec/replicatedJobs/{i}/template/spec/template/spec",
            )
    elif kind in REPLICA_SPECS:
        spec, field = _at(obj, kind, "spec"), REPLICA_SPECS[kind]
        elastic_max = (spec.get("elasticPolicy") or {}).get("maxReplicas")  # an elastic PyTorchJob's workers
        for role, rs in sorted(_at(spec, kind, field, "spec").items()):
            count = _count(rs.get("replicas"))
            if role == "Worker" and elastic_max is not None:
                count = max(count, _count(elastic_max))
            template = _at(rs, kind, "template.spec", f"spec.{field}.{role}")
            yield PodSet(role, count, template, f"/spec/{field}/{role}/template/spec")
    elif kind == "LeaderWorkerSet":
        yield from _lws_pod_sets(obj)
    elif kind == "RayJob":
        yield from _ray_job_pod_sets(obj)
    elif kind == "RayCluster":
        yield from _ray_cluster_pod_sets(_at(obj, kind, "spec"), "RayCluster", "/spec", "spec")
    elif kind == "Workload":
        for i, ps in enumerate(_list(obj, kind, "spec.podSets")):
            template = _at(ps, kind, "template.spec", f"spec.podSets[{i}]")
            yield PodSet(ps.get("name", str(i)), _count(ps.get("count")), template, _ps(i))
    else:
        raise WorkloadError(f"{group or 'core'}/{kind} is not a workload kind Allot checks")


REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs", "TFJob": "tfReplicaSpecs"}
"""Kubeflow jobs whose roles (Master and Worker; Launcher and Worker; Chief, PS, Worker, Evaluator) each run
``replicas`` pods."""


def _lws_pod_sets(obj: Mapping[str, Any]) -> Iterator[PodSet]:
    """A LeaderWorkerSet's ``replicas`` groups, each a leader and ``size - 1`` workers, all running at once (Kueue
    admits each group as a Workload of its own; the unit holds them together). The leader's template defaults to
    the workers'."""
    spec = _at(obj, "LeaderWorkerSet", "spec")
    groups = _count(spec.get("replicas"))
    lwt = _at(spec, "LeaderWorkerSet", "leaderWorkerTemplate", "spec")
    size = _count(lwt.get("size"))
    worker = _at(lwt, "LeaderWorkerSet", "workerTemplate.spec", "spec.leaderWorkerTemplate")
    pointer = "/spec/leaderWorkerTemplate"
    if lwt.get("leaderTemplate") is not None:
        leader = _at(lwt, "LeaderWorkerSet", "leaderTemplate.spec", "spec.leaderWorkerTemplate")
        yield PodSet("leader", groups, leader, f"{pointer}/leaderTemplate/spec")
        if size > 1:
            yield PodSet("workers", groups * (size - 1), worker, f"{pointer}/workerTemplate/spec")
    else:
        yield PodSet("workers", groups * size, worker, f"{pointer}/workerTemplate/spec")


def _ps(i: int) -> str:
    return f"/spec/podSets/{i}/template/spec"


def _ray_job_pod_sets(obj: Mapping[str, Any]) -> Iterator[PodSet]:
    spec = _at(obj, "RayJob", "spec")
    if spec.get("rayClusterSpec") is None:
        if spec.get("clusterSelector"):
            return  # runs on an existing RayCluster: the job itself holds no devices
        raise WorkloadError(
            "RayJob: spec.rayClusterSpec is missing (or set spec.clusterSelector to use a running cluster)"
        )
    cluster = _at(spec, "RayJob", "rayClusterSpec", "spec")
    yield from _ray_cluster_pod_sets(cluster, "RayJob", "/spec/rayClusterSpec", "spec.rayClusterSpec")
    # the submitter pod runs beside the cluster in K8sJobMode (KubeRay's default), and Kueue counts it as a pod
    # set of the Workload: what its template asks for is held with the rest
    submitter = spec.get("submitterPodTemplate")
    if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode" and submitter is not None:
        template = _at(submitter, "RayJob", "spec", "spec.submitterPodTemplate")
        yield PodSet("submitter", 1, template, "/spec/submitterPodTemplate/spec")


def _ray_cluster_pod_sets(cluster: Mapping[str, Any], kind: str, pointer: str, where: str) -> Iterator[PodSet]:
    """A Ray cluster's head and worker groups, from a RayCluster's spec or a RayJob's rayClusterSpec."""
    autoscaling = bool(cluster.get("enableInTreeAutoscaling"))
    head = _at(cluster, kind, "headGroupSpec.template.spec", where)
    yield PodSet("head", 1, head, f"{pointer}/headGroupSpec/template/spec")
    for i, group_spec in enumerate(cluster.get("workerGroupSpecs") or []):
        yield PodSet(
            group_spec.get("groupName", str(i)),
            _ray_workers(group_spec, autoscaling),
            _at(group_spec, kind, "template.spec", f"{where}.workerGroupSpecs[{i}]"),
            f"{pointer}/workerGroupSpecs/{i}/template/spec",
        )


def describe_requirements(spec: Mapping[str, Any]) -> str:
    """The requirements in words, for messages: ``gpu=a100-40gb and (gpu in [h100])``."""
    selector, terms = node_requirements(spec)
    parts = [f"{k}={v[0]}" for k, _, v in selector]
    if terms:
        parts.append(
            " or ".join(
                "(" + " and ".join(f"{k} {op} {sorted(v)}" if v else f"{k} {op}" for k, op, v in term) + ")"
                for term in terms
            )
        )
    return " and ".join(parts) or "nothing"
