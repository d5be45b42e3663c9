"""Reading dcgm-exporter series as Prometheus returns them: owners in every label spelling of the real
samples (tests/fixtures/usage/dcgm), metric preference, scaling, samples as coverage, gaps."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from accounting.policy.dcgm import activity, gaps, owner_of, parse_metrics, points, progress, renamed_targets

SAMPLES = Path(__file__).parents[2] / "fixtures" / "usage" / "dcgm"
H0 = datetime(2026, 11, 2, 10, tzinfo=UTC)


def labels_of(needle: str) -> dict[str, str]:
    """The labels of the first real series line containing ``needle``."""
    for path in sorted(SAMPLES.glob("*.prom")):
        for line in path.read_text().splitlines():
            if needle in line and not line.startswith("#"):
                return dict(re.findall(r'(\w+)="([^"]*)"', line))
    raise AssertionError(needle)


def series(labels: dict[str, str], *values: tuple[int, float]) -> dict[str, object]:
    """A matrix entry: ``values`` as (hour index, value), stamped at the end of each hour."""
    return {"metric": labels, "values": [[(H0 + timedelta(hours=h + 1)).timestamp(), str(v)] for h, v in values]}


def test_owners_in_each_spelling_of_the_real_samples() -> None:
    operator = owner_of(labels_of('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a8394b51'))
    assert (operator.namespace, operator.pod, operator.held) == ("default", "cuda-75454ffb9f-8ljq7", True)
    assert operator.model == "NVIDIA RTX 4000 Ada Generation"
    old = owner_of(labels_of("NVIDIA TITAN V"))  # 2.x exporter: pod="" on a free GPU
    assert not old.held
    legacy = owner_of(labels_of("dcgm_fi_prof_gr_engine_active"))  # pod_name/pod_namespace, empty
    assert not legacy.held
    mig_free = owner_of(labels_of('GPU_I_ID="8"'))
    assert not mig_free.held
    named = owner_of({"pod_name": "train-0", "pod_namespace": "vision"})  # --use-old-namespace, bound
    assert (named.namespace, named.pod) == ("vision", "train-0")
    job = owner_of({"hpc_job": "4711", "modelName": "NVIDIA A100"})
    assert job.held and job.job == "4711"


def test_prometheus_renamed_labels_name_the_workload_and_free_gpus_of_that_target_stay_free() -> None:
    target = {"job": "dcgm", "instance": "10.0.0.7:9400", "namespace": "gpu-operator", "pod": "dcgm-exporter-x"}
    bound = labels_of('pod="tensorflow-0"')  # as scraped: the exporter's owner labels renamed, the target's added
    bound["exported_namespace"], bound["exported_pod"] = bound.pop("namespace"), bound.pop("pod")
    bound.update(target)
    free = {**labels_of('modelName="NVIDIA L40S",Hostname="l40s.example.com"}'), **target}
    matrix = [series(bound, (0, 0.5)), series(free, (0, 0.5))]
    renamed = renamed_targets([matrix])
    assert renamed == {("dcgm", "10.0.0.7:9400")}
    owners = {p.owner.pod for p in points("M", matrix, [], renamed)}
    assert owners == {"tensorflow-0", ""}  # not the exporter's own pod
    assert owner_of(bound).namespace == "redacted"


def test_the_first_metric_wins_per_gpu_and_hour_and_values_are_scaled() -> None:
    gpu = labels_of('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a8394b51')
    prof = points("PROF", [series(gpu, (0, 0.5))], [series(gpu, (0, 120))])
    util = points("UTIL", [series(gpu, (0, 90), (1, 40))], [series(gpu, (0, 120), (1, 60))])
    found = activity([("PROF", 1.0, prof), ("UTIL", 0.01, util)], scrape_seconds=30)
    owner = owner_of(gpu)
    assert found.active[(owner, H0)] == pytest.approx(0.5)  # PROF, full hour (120 × 30 s)
    assert found.active[(owner, H0 + timedelta(hours=1))] == pytest.approx(0.4 * 0.5)  # UTIL, half the hour
    assert found.observed[(owner, H0 + timedelta(hours=1))] == pytest.approx(0.5)
    assert found.counts == {"series_hours": 2}


def test_free_gpus_and_impossible_values_are_counted_not_attributed() -> None:
    free = labels_of('GPU_I_ID="8"')
    broken = labels_of('GPU_I_ID="9"')
    found = activity(
        [
            ("PROF", 1.0, points("PROF", [series(free, (0, 0.9))], [series(free, (0, 120))])),
            ("PROF2", 1.0, points("PROF2", [series(broken, (0, 1.7)), series(broken, (1, -0.1))], [])),
        ],
        scrape_seconds=30,
    )
    assert found.active == {}
    assert found.counts == {"series_hours": 3, "series_without_pod": 1, "impossible_values": 2}
    assert "mean 1.7 is outside 0–1" in found.problems[0] and "model-playground-stg" in found.problems[0]


def test_hours_without_any_sample_are_gaps() -> None:
    assert gaps(H0, H0 + timedelta(hours=3), {H0 + timedelta(hours=1)}) == [H0, H0 + timedelta(hours=2)]


def test_metric_settings_are_read_with_clear_errors() -> None:
    assert parse_metrics(["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL:0.01"]) == (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
        ("DCGM_FI_DEV_GPU_UTIL", 0.01),
    )
    with pytest.raises(ValueError, match="scale after ':' must be a number"):
        parse_metrics(["DCGM_FI_DEV_GPU_UTIL:percent"])
    with pytest.raises(ValueError, match="give a metric name"):
        parse_metrics([":0.01"])


def test_progress_share_is_steps_over_the_fault_free_rate_and_never_above_one() -> None:
    pod = {"namespace": "vision", "pod": "train-0"}
    other = {"hpc_job": "4711"}
    shares, counted = progress(
        [series(pod, (0, 9000), (1, 50_000)), series(other, (0, 10)), series({"pod": "x", "namespace": "y"}, (0, -3))],
        [series(pod, (0, 120), (1, 120)), series(other, (0, 120)), series({"pod": "x", "namespace": "y"}, (0, 120))],
        [series(pod, (0, 5), (1, 5)), series({"pod": "x", "namespace": "y"}, (0, 5))],
        scrape_seconds=30,
    )
    who = owner_of(pod).who
    assert shares[(who, H0)] == pytest.approx(9000 / (5 * 3600))  # half the fault-free steps
    assert shares[(who, H0 + timedelta(hours=1))] == 1.0  # more than fault-free: capped
    assert counted == {"progress_without_rate": 1, "impossible_values": 1}
