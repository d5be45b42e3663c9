"""A ClusterQueue's status in Kueue's own figures (accounting.policy.kueue_queues), read from a status a user
posted (tests/fixtures/usage/kueue: flavorsUsage counts admitted work, flavorsReservation also what holds quota
while its admission check runs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from accounting.policy.kueue_queues import from_json, queue_status, to_json

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "usage" / "kueue"


def snapshots() -> list[dict]:
    text = (FIXTURE / "clusterqueue-gpu-status-reservation-vs-usage.yaml").read_text()
    parts = text.split("# --- snapshot ")[1:]
    return [yaml.safe_load(part.split("\n", 1)[1]) for part in parts]


def test_the_gpus_used_and_the_counts_are_kueues_own():
    a, b, _ = snapshots()
    cq = {"metadata": {"name": "cluster-queue"}, "spec": a["spec"], "status": b["status"]}
    found = queue_status(cq)
    assert (found.name, found.pending, found.reserving, found.admitted) == ("cluster-queue", 0, 4, 3)
    assert dict(found.gpus) == {"default-flavor": (32, 0)}  # flavorsUsage: the 8 reserved are not in use
    assert found.said("gke/") == (
        "Kueue: ClusterQueue cluster-queue — gke/default-flavor 32 used; 0 pending, 3 admitted"
    )
    assert from_json(to_json(found)) == found


def test_unused_flavors_are_left_out_and_a_status_kueue_has_not_written_yet_reads_as_empty():
    cq = {
        "metadata": {"name": "q"},
        "status": {
            "flavorsUsage": [
                {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": "6", "borrowed": "2"}]},
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "0", "borrowed": "0"}]},
                {"name": "odd", "resources": [{"name": "nvidia.com/gpu", "total": "1.5", "borrowed": "0"}]},
            ],
            "pendingWorkloads": 2,
        },
    }
    found = queue_status(cq)
    assert dict(found.gpus) == {"a100": (6, 2), "h100": (0, 0)}  # a fractional GPU is no GPU count: left out
    assert found.said() == "Kueue: ClusterQueue q — a100 6 used (2 borrowed); 2 pending, 0 admitted"
    fresh = queue_status({"metadata": {"name": "new"}, "spec": {"cohort": "org"}})
    assert (fresh.cohort, fresh.pending, dict(fresh.gpus)) == ("org", 0, {})
    assert fresh.said() == "Kueue: ClusterQueue new — no GPUs used; 0 pending, 0 admitted"
