"""GPU activity from DCGM through a real Prometheus (Debian's package) scraping real dcgm-exporter
series with values these tests set: attribution per namespace and flavor, Prometheus's exported_
labels, GPUs nobody holds, unbound namespaces, impossible values, skew, and every way a query fails."""

from __future__ import annotations

import socket
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from accounting.integrations.prometheus import Prometheus
from accounting.models import ActivityHour, SourceStatus, UsageHour
from accounting.services import usage_ingest_dcgm, usage_rollup
from quotas import services

pytestmark = [pytest.mark.django_db, pytest.mark.prometheus]
CUDA = "DCGM_FI_PROF_GR_ENGINE_ACTIVE@cuda-75454ffb9f-8ljq7@0/"  # GPU Operator v25.10, RTX 4000 Ada, default/
CUDA_UTIL = "DCGM_FI_DEV_GPU_UTIL@cuda-75454ffb9f-8ljq7@0/"  # the same GPU's old metric, in percent
TF0 = "DCGM_FI_PROF_GR_ENGINE_ACTIVE@tensorflow-0@0/"  # L40S, redacted/tensorflow-0 holds two GPUs
TF1 = "DCGM_FI_PROF_GR_ENGINE_ACTIVE@tensorflow-0@1/"
UNBOUND_NS = "DCGM_FI_PROF_GR_ENGINE_ACTIVE@text-embedding-predictor-00008-deployment-57946f6c67-vdtjl@0/7"
NO_POD = "DCGM_FI_PROF_GR_ENGINE_ACTIVE@unbound@0/8"  # an H100 MIG slice no pod holds
BROKEN = "DCGM_FI_PROF_GR_ENGINE_ACTIVE@tts-predictor-00011-deployment-5554f75554-8j8pl@0/9"


@pytest.fixture
def gpus(org, settings, prometheus):
    for name, model in (("rtx4000", "NVIDIA RTX 4000 Ada Generation"), ("l40s", "NVIDIA-L40S")):  # GFD's spelling
        services.flavor_set(actor=org.admin, reason="t", cluster=org.cluster, name=name, accelerator_model=model,
                            device_memory_gb=48, physical_devices=8)  # fmt: skip
    for unit, namespace in ((org.vision, "default"), (org.nlp, "redacted")):
        services.namespace_bind(actor=org.admin, reason="t", unit=unit, cluster=org.cluster, namespace=namespace)
    settings.ALLOT_DCGM_PROMETHEUS = {"west": prometheus.url}
    settings.ALLOT_DCGM_SCRAPE_SECONDS = 1
    return org


def scrape(exporter, phases, scrapes=3):
    """Serve each phase's values until Prometheus has scraped them ``scrapes`` times, then stop
    serving and let the last scrape land. Every served value is a sample Prometheus stored."""
    exporter.served.clear()
    exporter.serving = True
    for values in phases:
        exporter.choose(values)
        done = exporter.scrapes + scrapes
        deadline = time.monotonic() + 60
        while exporter.scrapes < done and time.monotonic() < deadline:
            time.sleep(0.2)
    exporter.stop_serving()
    time.sleep(2.5)


def test_activity_per_unit_and_flavor_is_what_the_exporter_served(gpus, dcgm_exporter):
    first = {CUDA: 0.5, CUDA_UTIL: 3, TF0: 0.25, TF1: 0.75, UNBOUND_NS: 0.2, NO_POD: 0.9, BROKEN: 1.7}
    scrape(dcgm_exporter, [first, {**first, CUDA: 0.7}])
    served = dcgm_exporter.served
    assert len(set(served[CUDA])) == 2  # both phases were scraped

    run = usage_ingest_dcgm(cluster=gpus.cluster)
    assert run.status == SourceStatus.PARTIAL, run.message  # the impossible value makes it partial
    rows = {(a.unit.slug, a.flavor.name): a for a in ActivityHour.objects.select_related("unit", "flavor")}
    totals = dict.fromkeys(rows, (0.0, 0.0))
    for a in ActivityHour.objects.select_related("unit", "flavor"):  # the scrape may straddle an hour
        key = (a.unit.slug, a.flavor.name)
        totals[key] = (totals[key][0] + a.active, totals[key][1] + a.observed)
    assert set(rows) == {("vision", "rtx4000"), ("nlp", "l40s")}
    active, observed = totals[("vision", "rtx4000")]  # the profiling metric wins over GPU_UTIL
    assert active == pytest.approx(sum(served[CUDA]) / 3600) and observed == pytest.approx(len(served[CUDA]) / 3600)
    active, observed = totals[("nlp", "l40s")]  # two GPUs of one pod, found through exported_namespace
    assert active == pytest.approx((sum(served[TF0]) + sum(served[TF1])) / 3600)
    assert observed == pytest.approx((len(served[TF0]) + len(served[TF1])) / 3600)

    counts = run.counts
    assert counts["series_without_pod"] >= 1 and counts["unresolved_owner"] >= 1 and counts["impossible_values"] >= 1
    assert "namespace model-playground-stg" in run.message
    assert "outside 0–1" in run.problems[0]["error"] and "1.7" in run.problems[0]["error"]
    assert counts["gap_hours"] == 24  # the day before the exporter ran had no sample: a gap, not idle
    assert "clock_skew_seconds" not in counts

    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    usage_rollup(start=hour - timedelta(hours=1), end=hour + timedelta(hours=1), now=now)
    measured = sum(
        h.active or 0
        for h in UsageHour.objects.filter(unit=gpus.vision, flavor__name="rtx4000", hour__gte=hour - timedelta(hours=1))
    )
    assert measured == pytest.approx(sum(served[CUDA]) / 3600)

    before = sorted(ActivityHour.objects.values_list("unit__slug", "flavor__name", "hour", "active", "observed"))
    again = usage_ingest_dcgm(cluster=gpus.cluster)  # the same hours read again: the same rows
    assert again.status == SourceStatus.PARTIAL
    after = sorted(ActivityHour.objects.values_list("unit__slug", "flavor__name", "hour", "active", "observed"))
    assert after == before


def test_productive_work_is_measured_from_a_workloads_progress_signal(gpus, dcgm_exporter):
    steps = iter(range(100_000, 200_000, 5))  # 5 steps a scrape, a scrape a second: 5 steps/s
    scrape(dcgm_exporter, [{CUDA: 0.6, "progress@cuda": lambda: next(steps), "rate@cuda": 10}], scrapes=8)
    run = usage_ingest_dcgm(cluster=gpus.cluster)
    assert run.status == SourceStatus.OK, run.message
    assert run.counts["reporting_progress"] >= 1
    rows = list(ActivityHour.objects.filter(unit=gpus.vision, flavor__name="rtx4000"))
    productive = sum(r.productive or 0 for r in rows)
    observed = sum(r.observed for r in rows)
    assert productive == pytest.approx(observed * 0.5, rel=0.15)  # 5 of a fault-free 10 steps/s
    assert sum(r.reporting for r in rows) == pytest.approx(observed)

    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    usage_rollup(start=hour - timedelta(hours=1), end=hour + timedelta(hours=1), now=now)
    hours = UsageHour.objects.filter(unit=gpus.vision, flavor__name="rtx4000", hour__gte=hour - timedelta(hours=1))
    assert hours and all(not h.productive_estimated for h in hours)  # measured, not estimated
    assert sum(h.productive or 0 for h in hours) == pytest.approx(productive)


def test_a_promql_error_a_prometheus_down_and_a_timeout_are_recorded_and_change_nothing(gpus, settings):
    ActivityHour.objects.create(
        cluster=gpus.cluster, unit=gpus.vision, flavor=gpus.flavor, hour=timezone.now().replace(minute=0, second=0,
        microsecond=0), active=0.5, observed=1.0,
    )  # fmt: skip
    settings.ALLOT_DCGM_METRICS = ["DCGM_FI_DEV_GPU_UTIL{"]
    run = usage_ingest_dcgm(cluster=gpus.cluster)
    assert run.status == SourceStatus.FAILED and run.watermark is None
    assert run.message.startswith("bad_data: HTTP 400") and "parse error" in run.message
    assert "avg_over_time(DCGM_FI_DEV_GPU_UTIL{[1h])" in run.message

    down = usage_ingest_dcgm(cluster=gpus.cluster, prometheus=Prometheus("http://127.0.0.1:9"))
    assert down.status == SourceStatus.FAILED and down.message.startswith("unreachable: cannot reach Prometheus")

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        slow = usage_ingest_dcgm(cluster=gpus.cluster, prometheus=Prometheus(f"http://127.0.0.1:{port}", timeout=0.5))
    assert slow.status == SourceStatus.FAILED and slow.message.startswith("timeout: no answer from")
    assert ActivityHour.objects.get().active == 0.5  # earlier data untouched


def test_a_clock_that_differs_from_prometheuss_is_counted(gpus):
    run = usage_ingest_dcgm(cluster=gpus.cluster, now=timezone.now() - timedelta(minutes=3))
    assert 170 <= run.counts["clock_skew_seconds"] <= 200
    assert "Prometheus's clock is +1" in run.message


def test_no_prometheus_for_the_cluster_says_which_setting(gpus, settings):
    settings.ALLOT_DCGM_PROMETHEUS = {}
    with pytest.raises(ValueError, match="add west=http://… to ALLOT_DCGM_PROMETHEUS"):
        usage_ingest_dcgm(cluster=gpus.cluster)


FB = "DCGM_FI_DEV_FB_USED@cuda-75454ffb9f-8ljq7@0/"  # the real exporter's framebuffer series, MiB


def test_each_workloads_peak_device_memory_per_hour(gpus, dcgm_exporter):
    from accounting.models import MemoryHour

    scrape(dcgm_exporter, [{FB: 30_000, TF0: 0.5}, {FB: 36_500, TF0: 0.5}])
    run = usage_ingest_dcgm(cluster=gpus.cluster)
    assert run.counts["memory_rows"] >= 1, run.counts
    rows = list(MemoryHour.objects.values_list("workload", "unit__slug", "flavor__name", "peak_mib", "devices"))
    assert {r[:3] for r in rows} == {("default/cuda-75454ffb9f-8ljq7", "vision", "rtx4000")}
    assert max(r[3] for r in rows) == 36_500 and {r[4] for r in rows} == {1}  # the peak, on its one GPU
    before = sorted(MemoryHour.objects.values_list("workload", "hour", "peak_mib"))
    usage_ingest_dcgm(cluster=gpus.cluster)  # the same hours read again: the same rows, not twice
    assert sorted(MemoryHour.objects.values_list("workload", "hour", "peak_mib")) == before
