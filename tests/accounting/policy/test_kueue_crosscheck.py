"""Allot's records beside Kueue's own numbers (issue #30.3), on the figures of a real production GPU
ClusterQueue (tests/fixtures/usage/kueue/clusterqueue-gpu-status-reservation-vs-usage.yaml, snapshot B:
40 GPUs reserved, 32 in use while a workload waited on its admission check). Pure."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from accounting.policy.findings import FindingKind
from accounting.policy.kueue_crosscheck import QueueHour, Tolerance, crosscheck

FIXTURE = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "usage"
    / "kueue"
    / "clusterqueue-gpu-status-reservation-vs-usage.yaml"
)
T0 = datetime(2026, 5, 5, 2, tzinfo=UTC)


def snapshot_b():
    """The GPU totals of the real snapshot B: flavorsReservation and flavorsUsage."""
    text = FIXTURE.read_text()
    block = text[text.index("# --- snapshot B") : text.index("# --- snapshot C")]
    status = yaml.safe_load(block)["status"]

    def gpus(rows):
        return next(float(r["total"]) for f in rows for r in f["resources"] if r["name"] == "nvidia.com/gpu")

    return gpus(status["flavorsReservation"]), gpus(status["flavorsUsage"])


def hours(values, *, start=T0):
    return [
        QueueHour("acme.research.nlp", 7, "acme/research/nlp", 3, "west/a100", start + timedelta(hours=i), u, r, a)
        for i, (u, r, a) in enumerate(values)
    ]


def test_the_real_queue_held_8_gpus_for_a_workload_waiting_on_its_check():
    reserved, used = snapshot_b()
    assert (reserved, used) == (40.0, 32.0)
    [found] = crosscheck(hours([(used, reserved, used)] * 3))  # Allot agrees on usage: only the held quota
    assert found.kind is FindingKind.QUOTA_HELD_BY_CHECKS
    assert found.summary == (
        "nlp on a100, 05 May 02:00–05:00: Kueue held 8.0 devices of quota for workloads still waiting for "
        "admission checks"
    )
    assert (found.start, found.end, found.unit, found.flavor) == (T0, T0 + timedelta(hours=3), 7, 3)
    assert found.evidence["hours"] == 3 and found.evidence["kueue_reservation"] == 40.0


def test_allots_records_and_kueue_disagree_only_beyond_the_tolerance_for_long_enough():
    [found] = crosscheck(hours([(32, 32, 24)] * 2 + [(32, 32, 31)]))  # the third hour is within tolerance
    assert found.kind is FindingKind.KUEUE_DISAGREES
    assert found.summary.startswith("Allot's records and Kueue disagree for nlp on a100, 05 May 02:00–04:00")
    assert "Kueue counted 32.0 devices in use, Allot 24.0" in found.summary
    assert crosscheck(hours([(32, 32, 24)])) == []  # one hour is not a run
    assert crosscheck(hours([(32, 32, 30)] * 5)) == []  # 2 of 32: within max(1, 10 %)
    assert crosscheck(hours([(3, 3, 1.5)] * 5), Tolerance(min_devices=1, share=0.1, min_hours=2))  # 1.5 > 1 device


def test_the_longest_run_is_reported_and_a_gap_breaks_a_run():
    rows = hours([(32, 32, 24)] * 2) + hours([(32, 32, 24)] * 3, start=T0 + timedelta(hours=5))
    [found] = crosscheck(rows)
    assert found.start == T0 + timedelta(hours=5) and found.evidence["hours"] == 3
