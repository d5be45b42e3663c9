"""Over-specified work and stranded pools, and device memory from both dcgm-exporter generations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from accounting.policy.dcgm import memory_peaks
from accounting.policy.mismatch import Pool, PoolHour, WorkloadHour, over_specified, stranded_pools

START = datetime(2026, 10, 1, tzinfo=UTC)
END = START + timedelta(hours=10)
BIG, MID, OLD = Pool(1, "lab/a100-80gb", 7, 80, 16), Pool(2, "lab/a100-40gb", 7, 40, 16), Pool(3, "lab/v100", 7, 32, 8)
POOLS = {p.id: p for p in (BIG, MID, OLD)}


def hours(peak_gb, n=10, devices=8, unit=5, workload="w"):
    return [WorkloadHour(unit, "acme/lab/nlp", BIG.id, workload, START + timedelta(hours=h), peak_gb * 1024, devices)
            for h in range(n)]  # fmt: skip


def test_work_that_fits_a_smaller_idle_pool_is_over_specified():
    idle = {(MID.id, START + timedelta(hours=h)): 8.0 for h in range(10)}
    (found,) = over_specified(hours(35), POOLS, idle, START, END)
    assert found.key == "over_specified:5:1" and found.evidence["fits"] == "lab/a100-40gb"  # 35 GB: not the V100
    assert found.evidence["device_hours"] == 80 and found.evidence["peak_p95_gb"] == 35.0
    assert found.summary.startswith("nlp: 1 workload (80 device-hours) on lab/a100-80gb (80 GB) peaked at 35 GB")
    assert over_specified(hours(37), POOLS, idle, START, END) == []  # 37 GB does not fit 40 GB with 10 % to spare
    assert over_specified(hours(35), POOLS, {}, START, END) == []  # nothing idle beside it: nowhere else to run
    assert over_specified(hours(35, n=2), POOLS, idle, START, END) == []  # 16 device-hours: below 24
    both = {**idle, **{(OLD.id, START + timedelta(hours=h)): 8.0 for h in range(10)}}
    (small,) = over_specified(hours(20), POOLS, both, START, END)
    assert small.evidence["fits"] == "lab/v100"  # the smallest pool it fits


def test_a_mostly_idle_pool_beside_a_queue_whose_work_would_fit_it():
    pool_hours = [PoolHour(BIG.id, START + timedelta(hours=h), 16, 8) for h in range(10)]
    pool_hours += [PoolHour(OLD.id, START + timedelta(hours=h), 0, 0) for h in range(10)]
    pool_hours += [PoolHour(MID.id, START + timedelta(hours=h), 16, 0) for h in range(10)]  # the 40 GB pool is full
    measured = hours(20, devices=4) + hours(70, devices=12, workload="big")  # 40 of 160 device-hours fit in 32 GB
    (found,) = stranded_pools(pool_hours, POOLS, measured, 10, START, END)
    assert found.key == "stranded_pool:3:1" and found.flavor == OLD.id
    assert found.evidence["waited_h"] == 80 and found.evidence["idle_device_hours"] == 80
    assert found.evidence["fits_share"] == 0.25
    assert "lab/v100 (8 GPUs, 32 GB) sat mostly idle in 10 of 10 hours" in found.summary
    unmeasured = stranded_pools(pool_hours, POOLS, [], 10, START, END)
    assert unmeasured == []  # without memory measurements nothing is claimed


def test_device_memory_from_both_dcgm_exporter_generations():
    stamp = (START + timedelta(hours=1)).timestamp()
    new = [{"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "UUID": "GPU-a", "namespace": "team",
                       "pod": "train-0"}, "values": [[stamp, "30000"]]},
           {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "1", "UUID": "GPU-b", "namespace": "team",
                       "pod": "train-0"}, "values": [[stamp, "36500"]]}]  # fmt: skip
    old = [{"metric": {"__name__": "dcgm_fb_used", "gpu": "0", "uuid": "GPU-c", "pod_name": "legacy-0",
                       "pod_namespace": "team"}, "values": [[stamp, "12000"]]},
           {"metric": {"__name__": "dcgm_fb_used", "gpu": "1", "UUID": "GPU-b", "namespace": "team",
                       "pod": "train-0"}, "values": [[stamp, "99999"]]}]  # fmt: skip
    peaks = {(p.owner.namespace, p.owner.pod): (p.peak_mib, p.devices) for p in memory_peaks([new, old])}
    assert peaks[("team", "train-0")] == (36_500, 2)  # GPU-b's hour came from the first metric: the old one ignored
    assert peaks[("team", "legacy-0")] == (12_000, 1)  # 1.x's pod_name / pod_namespace labels
