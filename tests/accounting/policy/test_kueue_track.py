"""Following Workloads through their conditions: real Workload objects from Kueue issues and docs
(tests/fixtures/usage/kueue), and the transitions a watch sees in order."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from accounting.policy.kueue import WorkloadError, admitted_devices, observe
from accounting.policy.kueue_track_json import track_from_json, track_to_json
from accounting.policy.sacct import EndState

SAMPLES = Path(__file__).parents[2] / "fixtures" / "usage" / "kueue"
GPU = {"nvidia.com/gpu": None}
SEEN = datetime(2026, 1, 1, tzinfo=UTC)


def sample(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((SAMPLES / name).read_text())
    return loaded["items"][0] if loaded.get("kind") == "List" else loaded


def t(minutes: int) -> str:
    return (datetime(2026, 3, 1, 12, tzinfo=UTC) + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def at(minutes: int) -> datetime:
    return datetime(2026, 3, 1, 12, tzinfo=UTC) + timedelta(minutes=minutes)


def workload(conditions: list[tuple[str, str, str, int]], *, gpus: int | None = 8, **status: Any) -> dict[str, Any]:
    """A Workload with these conditions (type, status, reason, minute) and, if ``gpus``, an admission."""
    body: dict[str, Any] = {
        "metadata": {
            "uid": "u-1",
            "name": "job-train-1",
            "namespace": "vision",
            "creationTimestamp": t(0),
            "resourceVersion": "10",
            "labels": {"allot.dev/owner": "ada", "allot.dev/project": "resnet", "allot.dev/tier": "P2"},
        },
        "spec": {"queueName": "vision", "active": True},
        "status": {
            "conditions": [
                {"type": k, "status": s, "reason": r, "message": "", "lastTransitionTime": t(m)}
                for k, s, r, m in conditions
            ],
            **status,
        },
    }
    if gpus is not None:
        body["status"]["admission"] = {
            "clusterQueue": "acme-vision",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 2,
                    "flavors": {"nvidia.com/gpu": "h100", "cpu": "h100"},
                    "resourceUsage": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
                }
            ],
        }
    return body


def test_devices_are_read_from_the_admission_of_the_900_gpu_raywork() -> None:
    obj = sample("workload-status-admitted-900gpu-then-deactivated.yaml")
    flavor, devices, resources = admitted_devices(obj, GPU) or ("", 0, {})
    assert (flavor, devices) == ("vm-gpu-a10-2", 900)
    assert resources["cpu"] == "26190.4"  # 400m + 26190
    assert resources["nvidia.com/gpu"] == "900"


def test_a_reservation_rejected_by_an_admission_check_held_quota_but_never_ran() -> None:
    obj = sample("workload-status-admitted-900gpu-then-deactivated.yaml")
    obj["metadata"] = {"uid": "ray-1", "namespace": "ml", "name": "raywork"}
    track = observe(None, obj, accelerators=GPU, seen_at=SEEN)
    assert track.runs == ()  # QuotaReserved=True, Admitted never: no devices were held
    assert [(e.reason, e.at) for e in track.evictions] == [
        ("DeactivatedDueToAdmissionCheck", datetime(2025, 7, 16, 18, 41, 13, tzinfo=UTC))
    ]
    assert track.state is EndState.EVICTED
    assert track.cluster_queue == "ml-infra"
    assert track.quota_reserved  # evicted, yet QuotaReserved=True: quota held while nothing runs


def test_kueue_015_finished_workload_that_lost_its_admission_is_rebuilt_from_accumulated_time() -> None:
    track = observe(
        None, sample("workload-v1beta1-finished-after-deactivation-kueue-0.15.yaml"), accelerators=GPU, seen_at=SEEN
    )
    assert track.state is EndState.FINISHED
    assert track.ended == datetime(2025, 12, 22, 9, 36, 25, tzinfo=UTC)
    (run,) = track.runs
    assert run.reconstructed and run.end == track.ended
    assert (run.end - run.start).total_seconds() == 103  # the misspelled v1beta1 field was read
    assert [e.reason for e in track.evictions] == ["Deactivated"]
    assert any("accumulated" in note for note in track.notes)


def test_kueue_015_finished_workload_keeps_the_devices_seen_while_it_ran() -> None:
    running = workload([("QuotaReserved", "True", "QuotaReserved", 1), ("Admitted", "True", "Admitted", 1)])
    first = observe(None, running, accelerators=GPU, seen_at=SEEN)
    assert first.state is EndState.RUNNING and first.runs[0].end is None and first.devices == 8
    done = workload(
        [
            ("QuotaReserved", "False", "Finished", 30),
            ("Admitted", "False", "Finished", 30),
            ("Finished", "True", "Succeeded", 30),
        ],
        gpus=None,
    )
    track = observe(first, done, accelerators=GPU, seen_at=SEEN)
    (run,) = track.runs
    assert (run.start, run.end, run.devices, run.flavor, run.ended_by) == (at(1), at(30), 8, "h100", "Finished")
    assert track.devices == 8 and track.state is EndState.FINISHED and track.held_seconds == 29 * 60


def test_pre_015_finished_workload_with_admitted_still_true_ends_at_finished() -> None:
    obj = workload([("Admitted", "True", "Admitted", 2), ("Finished", "True", "Succeeded", 40)])
    track = observe(None, obj, accelerators=GPU, seen_at=SEEN)
    assert [(r.start, r.end) for r in track.runs] == [(at(2), at(40))]
    assert track.state is EndState.FINISHED and not track.runs[0].reconstructed


def test_v1beta2_deactivated_workload_is_evicted_and_its_evictions_are_counted() -> None:
    obj = sample("workload-v1beta2-deactivated-evicted.yaml")
    track = observe(None, obj, accelerators=GPU, seen_at=SEEN)
    assert track.state is EndState.EVICTED
    assert [e.reason for e in track.evictions] == ["Deactivated"]
    assert track.queue == "user-queue" and track.devices == 0  # a CPU-only PyTorchJob
    (run,) = track.runs
    assert run.reconstructed and run.end and (run.end - run.start).total_seconds() == 93


def test_evicted_then_readmitted_gives_two_runs_and_one_eviction_in_order() -> None:
    admitted = [("QuotaReserved", "True", "QuotaReserved", 1), ("Admitted", "True", "Admitted", 1)]
    track = observe(None, workload(admitted), accelerators=GPU, seen_at=SEEN)
    preempted = workload(
        [
            ("QuotaReserved", "False", "Preempted", 20),
            ("Admitted", "False", "NoReservation", 20),
            ("Evicted", "True", "Preempted", 20),
            ("Requeued", "True", "Preempted", 20),
        ],
        gpus=None,
    )
    track = observe(track, preempted, accelerators=GPU, seen_at=SEEN)
    assert track.state is EndState.PREEMPTED and track.runs[0].end == at(20)
    readmitted = workload(
        [
            ("QuotaReserved", "True", "QuotaReserved", 35),
            ("Admitted", "True", "Admitted", 35),
            ("Evicted", "False", "QuotaReserved", 35),
            ("Requeued", "True", "Preempted", 20),
        ],
        gpus=4,
        schedulingStats={"evictions": [{"reason": "Preempted", "count": 1}]},
    )
    track = observe(track, readmitted, accelerators=GPU, seen_at=SEEN)
    assert [(r.start, r.end, r.devices, r.ended_by) for r in track.runs] == [
        (at(1), at(20), 8, "Preempted"),
        (at(35), None, 4, ""),
    ]
    assert [(e.reason, e.at) for e in track.evictions] == [("Preempted", at(20))]
    assert track.state is EndState.RUNNING and track.admitted == at(1)
    again = observe(track, readmitted, accelerators=GPU, seen_at=SEEN)
    assert again == track  # the same object seen twice (a relist) changes nothing


def test_an_eviction_missed_between_two_observations_is_kept_from_scheduling_stats() -> None:
    first = observe(None, workload([("Admitted", "True", "Admitted", 1)]), accelerators=GPU, seen_at=SEEN)
    later = workload(
        [("Admitted", "True", "Admitted", 50), ("Evicted", "False", "QuotaReserved", 50)],
        schedulingStats={"evictions": [{"reason": "PodsReadyTimeout", "count": 1}]},
    )
    track = observe(first, later, accelerators=GPU, seen_at=SEEN)
    assert [(r.start, r.end, r.ended_by) for r in track.runs] == [(at(1), at(50), "readmitted"), (at(50), None, "")]
    assert [(e.reason, e.at) for e in track.evictions] == [("PodsReadyTimeout", None)]
    assert track.notes


def test_deleted_while_running_ends_the_run_when_the_deletion_was_seen() -> None:
    first = observe(None, workload([("Admitted", "True", "Admitted", 1)]), accelerators=GPU, seen_at=SEEN)
    gone = observe(
        first, workload([("Admitted", "True", "Admitted", 1)]), accelerators=GPU, seen_at=at(9), deleted=True
    )
    assert gone.state is EndState.CANCELLED and gone.runs[0].end == at(9) and gone.ended == at(9)


def test_pending_workload_has_no_run_and_labels_give_owner_project_tier() -> None:
    track = observe(
        None, workload([("QuotaReserved", "False", "Pending", 1)], gpus=None), accelerators=GPU, seen_at=SEEN
    )
    assert track.state is EndState.PENDING and track.runs == ()
    assert (track.owner, track.project, track.tier, track.namespace) == ("ada", "resnet", "P2", "vision")


def test_bad_objects_name_the_field() -> None:
    with pytest.raises(WorkloadError, match=r"metadata\.uid"):
        observe(None, {"metadata": {}}, accelerators=GPU, seen_at=SEEN)
    bad = workload([("Admitted", "True", "Admitted", 1)])
    bad["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["nvidia.com/gpu"] = "lots"
    with pytest.raises(WorkloadError, match=r"resourceUsage nvidia\.com/gpu"):
        observe(None, bad, accelerators=GPU, seen_at=SEEN)
    late = copy.deepcopy(bad)
    late["status"]["conditions"][0]["lastTransitionTime"] = "yesterday"
    with pytest.raises(WorkloadError, match="RFC 3339"):
        observe(None, late, accelerators=GPU, seen_at=SEEN)


def test_a_track_stored_as_json_reads_back_equal() -> None:
    track = observe(None, workload([("Admitted", "True", "Admitted", 1)]), accelerators=GPU, seen_at=SEEN)
    track = observe(
        track,
        workload([("Admitted", "False", "NoReservation", 9), ("Evicted", "True", "Preempted", 9)], gpus=None),
        accelerators=GPU,
        seen_at=SEEN,
    )
    stored = json.loads(json.dumps(track_to_json(track)))
    assert track_from_json(stored) == track
