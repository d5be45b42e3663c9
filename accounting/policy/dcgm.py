"""GPU activity from dcgm-exporter series, as Prometheus returns them. Pure: PromQL matrix results
in, device-hours of measured activity per owner and hour out, with what could not be attributed.

Allot never scrapes GPUs; it asks the Prometheus that already does, per hour,
``avg_over_time(<metric>[1h])`` and ``count_over_time(<metric>[1h])`` for each activity metric in
``DEFAULT_METRICS`` order (the first a GPU reports wins for that hour):

* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` — ratio 0–1 of time the graphics engine was busy (profiling
  metric; reported for MIG slices too; not on pre-Volta GPUs);
* ``DCGM_FI_DEV_GPU_UTIL`` — percent; the old metric, not in the exporter's default counters since
  2.3 but still what pre-Volta GPUs report.

DCGM 4.6 standardised field names and keeps the old ones as deprecated aliases; a site whose
exporter exports a new name adds it (with its scale) to ``ALLOT_DCGM_METRICS``.

Who a GPU belongs to comes from the exporter's labels, in every spelling seen in the wild: ``pod`` /
``namespace`` (Kubernetes mode), ``pod_name`` / ``pod_namespace`` (``--use-old-namespace``), the
``exported_`` prefix Prometheus gives the exporter's labels when the scrape target's own clash (the
exporter pod's ``namespace`` and ``pod``, added by Kubernetes service discovery), and ``hpc_job`` for
Slurm jobs (the exporter's HPC job mapping). A series with none of them, or with them empty (old
exporters print ``pod=""``), is a GPU no workload holds: counted, not attributed.

Active device-hours of one GPU in one hour = mean activity × the part of the hour with samples
(samples × scrape interval / 3600, at most 1): an hour without samples is a gap, not an idle hour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime

DEFAULT_METRICS: tuple[tuple[str, float], ...] = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
    ("DCGM_FI_DEV_GPU_UTIL", 0.01),
)
POD_LABELS = ("exported_pod", "pod", "pod_name")
NAMESPACE_LABELS = ("exported_namespace", "namespace", "pod_namespace")
JOB_LABELS = ("exported_hpc_job", "hpc_job")
MODEL_LABELS = ("exported_modelName", "modelName")
PROFILE_LABELS = ("exported_GPU_I_PROFILE", "GPU_I_PROFILE")
"""The MIG profile of a series that is one MIG instance (``1g.10gb``): dcgm-exporter labels each instance with
it and ``GPU_I_ID``. Its device-hours are the instance's; the service weighs them in GPU-equivalents."""
"""Where both are set, the ``exported_`` one is the exporter's: the plain one is then the scrape
target's own (the dcgm-exporter pod's namespace), which Prometheus put there when they clashed."""
RENAMED = {"pod": "exported_pod", "namespace": "exported_namespace", "hpc_job": "exported_hpc_job"}
QUEUE_LABELS = ("kueue_x_k8s_io_cluster_queue_name", "label_kueue_x_k8s_io_cluster_queue_name")
"""Kueue's pod label ``kueue.x-k8s.io/cluster-queue-name`` as the exporter's pod-label option (or a
kube-state-metrics join) spells it: the ClusterQueue the pod's Workload was admitted to, which names the
unit when its namespace is bound to none (a shared namespace)."""
DEVICE_LABELS = ("UUID", "uuid", "GPU_I_ID", "Hostname", "hostname", "gpu")


def first_label(labels: Mapping[str, str], names: Sequence[str]) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


@dataclass(frozen=True)
class Owner:
    """Who held a GPU: a pod in a namespace, or a Slurm job; and the GPU's model."""

    namespace: str = ""
    pod: str = ""
    job: str = ""
    model: str = ""
    queue: str = ""
    """The Kueue ClusterQueue it was admitted to, where the series says (``QUEUE_LABELS``)."""
    profile: str = ""
    """The MIG profile when the GPU is a MIG instance (``PROFILE_LABELS``), else empty."""

    @property
    def held(self) -> bool:
        return bool(self.namespace and self.pod) or bool(self.job)

    @property
    def who(self) -> tuple[str, str, str]:
        """The workload, whatever GPU model: what progress series and GPU series share."""
        return self.namespace, self.pod, self.job


def target_of(labels: Mapping[str, str]) -> tuple[str, str]:
    """The scrape target a series came from (Prometheus's ``job`` and ``instance``)."""
    return labels.get("job", ""), labels.get("instance", "")


def renamed_targets(matrices: Iterable[Iterable[Mapping[str, object]]]) -> set[tuple[str, str]]:
    """Scrape targets whose series carry ``exported_`` owner labels: there Prometheus kept the
    target's own ``namespace``/``pod`` (the exporter pod's), so on a GPU no pod holds — which has no
    ``exported_`` labels to tell it — those name the exporter, not a workload."""
    found = set()
    for matrix in matrices:
        for series in matrix:
            labels = _labels(series)
            if any(labels.get(name) is not None for name in RENAMED.values()):
                found.add(target_of(labels))
    return found


def owner_of(labels: Mapping[str, str], renamed: bool = False) -> Owner:
    """Who holds the GPU of a series. ``renamed``: its target's plain owner labels are the target's
    own (see ``renamed_targets``), so only the ``exported_`` ones and the old spellings count."""
    skip = set(RENAMED) if renamed else set()
    return Owner(
        namespace=first_label(labels, [n for n in NAMESPACE_LABELS if n not in skip]),
        pod=first_label(labels, [n for n in POD_LABELS if n not in skip]),
        job=first_label(labels, [n for n in JOB_LABELS if n not in skip]),
        model=first_label(labels, MODEL_LABELS),
        queue=first_label(labels, QUEUE_LABELS),
        profile=first_label(labels, PROFILE_LABELS),
    )


def device_of(labels: Mapping[str, str]) -> tuple[str, ...]:
    """One GPU (or MIG slice): the labels that tell devices apart, whatever their spelling."""
    return tuple(labels.get(name, "") for name in DEVICE_LABELS)


@dataclass(frozen=True)
class Point:
    """One GPU in one hour, from one metric."""

    metric: str
    device: tuple[str, ...]
    owner: Owner
    hour: datetime
    mean: float
    samples: int


@dataclass
class Activity:
    """Measured activity per owner and hour, and what could not be used."""

    active: dict[tuple[Owner, datetime], float] = field(default_factory=dict)
    observed: dict[tuple[Owner, datetime], float] = field(default_factory=dict)
    """Device-hours with telemetry (the denominator of active)."""
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    hours_with_data: set[datetime] = field(default_factory=set)

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n


def points(
    metric: str,
    averages: Iterable[Mapping[str, object]],
    counts: Iterable[Mapping[str, object]],
    renamed: Set[tuple[str, str]] = frozenset(),
) -> list[Point]:
    """Join the ``avg_over_time`` and ``count_over_time`` matrices of one metric (query_range,
    step 1 h, each value stamped at the *end* of its hour) into points per GPU and hour.
    ``renamed``: the scrape targets of ``renamed_targets``."""

    def owner(labels: Mapping[str, str]) -> Owner:
        return owner_of(labels, target_of(labels) in renamed)

    sampled: dict[tuple[tuple[str, ...], Owner, float], int] = {}
    for series in counts:
        labels = _labels(series)
        key = (device_of(labels), owner(labels))
        for stamp, value in _values(series):
            sampled[(*key, stamp)] = int(float(value))
    found = []
    for series in averages:
        labels = _labels(series)
        device, held = device_of(labels), owner(labels)
        for stamp, value in _values(series):
            hour = datetime.fromtimestamp(stamp - 3600, tz=UTC)
            found.append(Point(metric, device, held, hour, float(value), sampled.get((device, held, stamp), 0)))
    return found


def _labels(series: Mapping[str, object]) -> dict[str, str]:
    metric = series.get("metric")
    return {str(k): str(v) for k, v in metric.items()} if isinstance(metric, Mapping) else {}


def _values(series: Mapping[str, object]) -> list[tuple[float, str]]:
    values = series.get("values")
    if not isinstance(values, list):
        return []
    return [(float(stamp), str(value)) for stamp, value in values]


def activity(
    per_metric: Sequence[tuple[str, float, list[Point]]], *, scrape_seconds: float, max_problems: int = 20
) -> Activity:
    """Device-hours of activity per owner and hour from the points of each metric, in preference
    order: a GPU's hour counts once, from the first metric that has it."""
    result = Activity()
    taken: set[tuple[tuple[str, ...], datetime]] = set()
    for metric, scale, found in per_metric:
        for point in found:
            slot = (point.device, point.hour)
            if slot in taken:
                continue
            taken.add(slot)
            result.hours_with_data.add(point.hour)
            result.count("series_hours")
            value = point.mean * scale
            if not 0 <= value <= 1 or point.samples < 0:
                result.count("impossible_values")
                if len(result.problems) < max_problems:
                    result.problems.append(
                        f"{metric} on {point.owner.namespace or point.owner.job or 'no owner'}/{point.owner.pod}"
                        f" at {point.hour:%Y-%m-%d %H:00}: mean {point.mean:g} is outside 0–{1 / scale:g}"
                    )
                continue
            if not point.owner.held:
                result.count("series_without_pod")
                continue
            present = min(1.0, point.samples * scrape_seconds / 3600)
            key = (point.owner, point.hour)
            result.active[key] = result.active.get(key, 0.0) + value * present
            result.observed[key] = result.observed.get(key, 0.0) + present
    return result


PROGRESS_DOC = """
Progress signal (optional; the productive tier is measured where a workload reports it):

* ``allot_progress_steps_total`` — a counter of the steps (or samples, or tokens) the workload has
  completed, with the same owner labels as its GPUs (``namespace`` + ``pod``, or ``hpc_job``);
* ``allot_progress_fault_free_steps_per_second`` — a gauge: the rate the same workload reaches on
  its devices when nothing goes wrong (from a clean run, or declared by its owner).

Productive device-hours of a workload in an hour = its GPU device-hours with telemetry × min(1,
steps it completed ÷ (fault-free rate × seconds it reported)). Work redone after a restart, time
spent loading or checkpointing, and stalls all lower it; it is never above the device-hours held.
"""


def progress(
    increases: Iterable[Mapping[str, object]],
    counts: Iterable[Mapping[str, object]],
    rates: Iterable[Mapping[str, object]],
    *,
    scrape_seconds: float,
    renamed: Set[tuple[str, str]] = frozenset(),
) -> tuple[dict[tuple[tuple[str, str, str], datetime], float], dict[str, int]]:
    """Each reporting workload's productive share per hour (0–1), from ``increase(steps[1h])``,
    ``count_over_time(steps[1h])`` and ``max_over_time(fault_free_rate[1h])`` (see PROGRESS_DOC),
    and what could not be used, counted."""

    def keyed(matrix: Iterable[Mapping[str, object]]) -> dict[tuple[tuple[str, str, str], float], float]:
        found = {}
        for series in matrix:
            labels = _labels(series)
            who = owner_of(labels, target_of(labels) in renamed).who
            for stamp, value in _values(series):
                found[(who, stamp)] = float(value)
        return found

    done, samples, rate = keyed(increases), keyed(counts), keyed(rates)
    shares: dict[tuple[tuple[str, str, str], datetime], float] = {}
    counted: dict[str, int] = {}
    for (who, stamp), steps in done.items():
        fault_free = rate.get((who, stamp), 0.0)
        seconds = samples.get((who, stamp), 0.0) * scrape_seconds
        if fault_free <= 0 or seconds <= 0:
            counted["progress_without_rate"] = counted.get("progress_without_rate", 0) + 1
            continue
        if steps < 0:
            counted["impossible_values"] = counted.get("impossible_values", 0) + 1
            continue
        shares[(who, datetime.fromtimestamp(stamp - 3600, tz=UTC))] = min(1.0, steps / (fault_free * seconds))
    return shares, counted


def gaps(start: datetime, end: datetime, with_data: set[datetime]) -> list[datetime]:
    """Whole hours of [start, end) without one sample from any GPU: a gap in telemetry."""
    hour = start.replace(minute=0, second=0, microsecond=0)
    missing = []
    while hour < end:
        if hour not in with_data:
            missing.append(hour)
        hour = datetime.fromtimestamp(hour.timestamp() + 3600, tz=UTC)
    return missing


def parse_metrics(pairs: Iterable[str]) -> tuple[tuple[str, float], ...]:
    """``NAME`` or ``NAME:scale`` entries (scale turns the value into a 0–1 ratio: 0.01 for percent)."""
    found = []
    for pair in pairs:
        name, _, scale = pair.partition(":")
        if not name.strip():
            raise ValueError(f"{pair!r}: give a metric name, e.g. DCGM_FI_DEV_GPU_UTIL:0.01")
        try:
            found.append((name.strip(), float(scale) if scale else 1.0))
        except ValueError as exc:
            raise ValueError(f"{pair!r}: the scale after ':' must be a number, e.g. 0.01 for percent") from exc
    return tuple(found)


MEMORY_DOC = """
Device memory a workload used: ``max_over_time(<metric>[1h])`` of the framebuffer in use, MiB, per GPU
and hour, for each name of ``ALLOT_DCGM_MEMORY_METRICS`` in preference order (default
``DCGM_FI_DEV_FB_USED``, the exporter's name since 2.x, then ``dcgm_fb_used``, the 1.x one): a GPU's
hour counts once, from the first that has it. Per workload (pod or Slurm job) and hour: the peak over
its GPUs and how many GPUs it held — what the over-specification finding compares with each flavor's
device memory.
"""


@dataclass(frozen=True)
class MemoryPeak:
    owner: Owner
    hour: datetime
    peak_mib: float
    devices: int


def memory_peaks(
    matrices: Sequence[Iterable[Mapping[str, object]]], renamed: Set[tuple[str, str]] = frozenset()
) -> list[MemoryPeak]:
    """Per owner and hour: the peak framebuffer used over its GPUs and their number (MEMORY_DOC).
    Series no workload holds, and negative values, are left out."""
    taken: set[tuple[tuple[str, ...], datetime]] = set()
    peaks: dict[tuple[Owner, datetime], float] = {}
    devices: dict[tuple[Owner, datetime], set[tuple[str, ...]]] = {}
    for matrix in matrices:
        for series in matrix:
            labels = _labels(series)
            held = owner_of(labels, target_of(labels) in renamed)
            device = device_of(labels)
            for stamp, value in _values(series):
                hour = datetime.fromtimestamp(stamp - 3600, tz=UTC)
                if (device, hour) in taken or not held.held:
                    continue
                taken.add((device, hour))
                mib = float(value)
                if mib < 0:
                    continue
                key = (held, hour)
                peaks[key] = max(peaks.get(key, 0.0), mib)
                devices.setdefault(key, set()).add(device)
    return [MemoryPeak(owner, hour, peak, len(devices[(owner, hour)])) for (owner, hour), peak in sorted(
        peaks.items(), key=lambda kv: (kv[0][1], kv[0][0].namespace, kv[0][0].pod, kv[0][0].job))]  # fmt: skip
