"""The Kueue usage source through the official client: list, watch from the list's resourceVersion,
a watch that drops, one the server ends, a 410 answered by a relist, a Workload evicted and
readmitted, deletions seen and unseen, an unbound namespace, an unreachable cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command

from accounting.models import Allocation, SourceRun, SourceStatus, WorkloadRecord
from accounting.services.kueue import usage_resync_kueue, usage_watch_kueue
from quotas import services
from quotas.integrations.kubernetes import KueueClient, api_client_for
from tests.kube_watch import WatchScriptServer, expired, list_step, watch_step

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)


def t(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def wl(uid, namespace, version, conditions, *, gpus=None, flavor="a100", **status):
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "uid": uid,
            "name": f"job-{uid}",
            "namespace": namespace,
            "resourceVersion": version,
            "creationTimestamp": t(0),
            "labels": {"allot.dev/owner": "ada", "allot.dev/project": "detect", "allot.dev/tier": "P2"},
        },
        "spec": {"queueName": namespace, "active": True},
        "status": {
            "conditions": [
                {"type": k, "status": s, "reason": r, "message": r, "lastTransitionTime": t(m)}
                for k, s, r, m in conditions
            ],
            **status,
        },
    }
    if gpus:
        body["status"]["admission"] = {
            "clusterQueue": f"acme-research-{namespace}",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {"nvidia.com/gpu": flavor},
                    "resourceUsage": {"nvidia.com/gpu": str(gpus), "cpu": "8"},
                }
            ],
        }
    return body


RUNNING = [("QuotaReserved", "True", "QuotaReserved", 5), ("Admitted", "True", "Admitted", 5)]
PREEMPTED = [
    ("QuotaReserved", "False", "Preempted", 20),
    ("Admitted", "False", "NoReservation", 20),
    ("Evicted", "True", "Preempted", 20),
    ("Requeued", "True", "Preempted", 20),
]
READMITTED = [
    ("QuotaReserved", "True", "QuotaReserved", 30),
    ("Admitted", "True", "Admitted", 30),
    ("Evicted", "False", "QuotaReserved", 30),
    ("Requeued", "True", "Preempted", 20),
]
FINISHED_015 = [  # Kueue v0.15.0–v0.15.2: admission dropped when it finished
    ("QuotaReserved", "False", "Finished", 70),
    ("Admitted", "False", "Finished", 70),
    ("Evicted", "False", "QuotaReserved", 30),
    ("Finished", "True", "Succeeded", 70),
]
STATS = {"schedulingStats": {"evictions": [{"reason": "Preempted", "count": 1}]}}


def script():
    train = wl("u-train", "vision", "90", RUNNING, gpus=8)
    waiting = wl("u-wait", "vision", "91", [("QuotaReserved", "False", "Pending", 1)])
    stray = wl("u-stray", "scratch", "150", RUNNING, gpus=2)
    return [
        list_step([train, waiting], "100"),
        watch_step(
            "100", [{"type": "MODIFIED", "object": wl("u-train", "vision", "101", PREEMPTED, **STATS)}], end="drop"
        ),
        watch_step(
            "101",
            [
                {"type": "MODIFIED", "object": wl("u-train", "vision", "102", READMITTED, gpus=4, **STATS)},
                {"type": "BOOKMARK", "object": {"kind": "Workload", "metadata": {"resourceVersion": "105"}}},
            ],
        ),
        watch_step("105", [expired("105", "180")]),
        list_step([wl("u-train", "vision", "160", FINISHED_015, **STATS), stray], "200"),
        watch_step("200", [{"type": "DELETED", "object": wl("u-stray", "scratch", "201", RUNNING, gpus=2)}]),
    ]


@pytest.fixture
def bound(org):
    services.namespace_bind(actor=org.admin, reason="test", unit=org.vision, cluster=org.cluster, namespace="vision")
    return org


def watch(org, server, watches):
    org.cluster.connection_ref = f"url:{server.url}"
    org.cluster.save()
    client = KueueClient(api_client_for(org.cluster.connection_ref))
    return usage_watch_kueue(
        cluster=org.cluster, client=client, timeout_seconds=5, flush_seconds=0, max_watches=watches
    )


def test_watch_follows_an_eviction_and_readmission_through_a_drop_and_a_410(bound):
    with WatchScriptServer(script()) as server:
        runs = watch(bound, server, watches=4)
    assert server.mismatches == [] and server.served == 6
    assert [(r.name, r.status) for r in runs] == [
        ("list", SourceStatus.OK),
        ("watch", SourceStatus.PARTIAL),  # dropped: resumed from the last resourceVersion it saw
        ("watch", SourceStatus.OK),
        ("watch", SourceStatus.PARTIAL),  # 410: listed again
        ("list", SourceStatus.OK),
        ("watch", SourceStatus.OK),
    ]
    assert "Dropped" in runs[1].message and "Expired" in runs[3].message
    assert [r.cursor for r in runs] == ["100", "101", "105", "", "200", "201"]

    train = WorkloadRecord.objects.get(scheduler_id="u-train")
    assert (train.unit, train.state, train.account, train.owner, train.tier) == (
        bound.vision, "finished", "vision", "ada", "P2"
    )  # fmt: skip
    assert (train.submitted_at, train.admitted_at, train.ended_at) == (at(0), at(5), at(70))
    assert train.evictions == [{"reason": "Preempted", "at": at(20).isoformat(), "message": "Preempted"}]
    runs_held = [(a.start, a.end, a.devices, a.raw_state) for a in train.allocations.order_by("start")]
    assert runs_held == [(at(5), at(20), 8, "evicted Preempted"), (at(30), at(70), 4, "Finished")]
    assert train.held_seconds == (15 + 40) * 60 and train.devices == 4 and train.flavor == bound.flavor

    waiting = WorkloadRecord.objects.get(scheduler_id="u-wait")
    assert waiting.state == "cancelled" and not waiting.allocations.exists()  # gone from the relist
    assert runs[4].counts["deleted_unseen"] == 1

    stray = WorkloadRecord.objects.get(scheduler_id="u-stray")
    assert stray.unit is None and stray.state == "cancelled"  # kept, and counted
    assert runs[4].counts["unresolved_namespace"] >= 1 and "scratch" in runs[4].message
    assert [(a.start, a.unit_id) for a in stray.allocations.all()] == [(at(5), None)]
    assert stray.allocations.get().end is not None


def test_folding_the_same_objects_again_changes_nothing(bound):
    with WatchScriptServer(script()) as server:
        watch(bound, server, watches=4)
    before = {r.scheduler_id: (r.state, r.evictions, r.track, r.held_seconds) for r in WorkloadRecord.objects.all()}
    allocations = sorted(Allocation.objects.values_list("record__scheduler_id", "start", "end", "devices", "borrowed"))
    final = [wl("u-train", "vision", "160", FINISHED_015, **STATS)]
    with WatchScriptServer([list_step(final, "300")]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        run = usage_resync_kueue(cluster=bound.cluster)
    assert run.status == SourceStatus.OK and server.mismatches == []
    after = {r.scheduler_id: (r.state, r.evictions, r.track, r.held_seconds) for r in WorkloadRecord.objects.all()}
    assert after == before
    again = sorted(Allocation.objects.values_list("record__scheduler_id", "start", "end", "devices", "borrowed"))
    assert again == allocations


def test_borrowed_devices_at_admission_count_what_the_unit_already_held(bound):
    # vision's guarantee on a100 is 20: a 16-GPU job, then a 8-GPU one while it runs → 4 borrowed
    first = wl("u-a", "vision", "10", RUNNING, gpus=16)
    second = wl("u-b", "vision", "11", [("Admitted", "True", "Admitted", 10)], gpus=8)
    with WatchScriptServer([list_step([first], "10"), list_step([first, second], "11")]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        usage_resync_kueue(cluster=bound.cluster)
        usage_resync_kueue(cluster=bound.cluster)
    assert WorkloadRecord.objects.get(scheduler_id="u-a").borrowed == 0
    assert WorkloadRecord.objects.get(scheduler_id="u-b").borrowed == 4


def test_an_unreachable_cluster_is_recorded_and_earlier_data_stays(bound):
    with WatchScriptServer([list_step([wl("u-a", "vision", "10", RUNNING, gpus=2)], "10")]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        usage_resync_kueue(cluster=bound.cluster)
    bound.cluster.connection_ref = "url:http://127.0.0.1:9"
    run = usage_resync_kueue(cluster=bound.cluster)
    assert run.status == SourceStatus.FAILED and run.watermark is None
    assert run.message.startswith("list Workloads: 0 Unreachable")
    assert WorkloadRecord.objects.get(scheduler_id="u-a").state == "running"


def test_a_workload_allot_cannot_read_is_a_problem_on_the_run_not_a_crash(bound):
    bad = wl("u-bad", "vision", "10", RUNNING, gpus=2)
    bad["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["nvidia.com/gpu"] = "two"
    with WatchScriptServer([list_step([bad, wl("u-ok", "vision", "11", RUNNING, gpus=2)], "11")]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        run = usage_resync_kueue(cluster=bound.cluster)
    assert run.status == SourceStatus.PARTIAL and run.counts["problems"] == 1
    assert "resourceUsage nvidia.com/gpu" in run.problems[0]["error"] and "job-u-bad" in run.problems[0]["text"]
    assert list(WorkloadRecord.objects.values_list("scheduler_id", flat=True)) == ["u-ok"]


def test_the_watch_command_resumes_from_the_stored_cursor(bound):
    with WatchScriptServer([list_step([], "40"), watch_step("40", [], timeout=5)]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        bound.cluster.save()
        call_command("allot_watch_kueue", "--cluster", "west", "--timeout-seconds", "5", "--watches", "1")
    with WatchScriptServer([watch_step("40", [], timeout=5)]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        bound.cluster.save()
        call_command("allot_watch_kueue", "--cluster", "west", "--timeout-seconds", "5", "--watches", "1")
        assert server.mismatches == [] and server.served == 1  # no relist: it went on from resourceVersion 40
    assert SourceRun.objects.filter(name="watch", status=SourceStatus.OK).count() == 2


def test_the_beat_task_resyncs_every_connected_kubernetes_cluster(bound, monkeypatch):
    from accounting.tasks import resync_all_kueue
    from config.celery import app

    with WatchScriptServer([list_step([wl("u-a", "vision", "10", RUNNING, gpus=2)], "10")]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        bound.cluster.save()
        monkeypatch.setitem(app.conf, "task_always_eager", True)  # the queued resync runs here
        assert resync_all_kueue() == [bound.cluster.pk]
    run = SourceRun.objects.get(cluster=bound.cluster)
    assert (run.status, run.cursor, run.counts["workloads"]) == (SourceStatus.OK, "10", 1)


@pytest.mark.postgres
def test_kueue_runs_roll_up_into_guarantee_allocated_and_an_estimated_productive_loss(bound):
    from accounting.models import UsageHour
    from accounting.services import usage_rollup

    with WatchScriptServer(script()) as server:
        watch(bound, server, watches=4)
    usage_rollup(start=T0, end=T0 + timedelta(hours=2))
    hours = {h.hour: h for h in UsageHour.objects.filter(unit=bound.vision, flavor=bound.flavor)}
    nine, ten = hours[T0], hours[T0 + timedelta(hours=1)]
    # 8 GPUs 09:05-09:20, evicted; 4 GPUs 09:30-10:10
    assert nine.allocated == pytest.approx(8 * 15 / 60 + 4 * 30 / 60) and ten.allocated == pytest.approx(4 * 10 / 60)
    assert nine.borrowed == 0 and nine.within == pytest.approx(nine.allocated)
    assert (nine.guarantee, ten.guarantee, nine.minutes) == (20, 20, 60)  # vision's guarantee, every covered hour
    # the preemption at 09:20 lost what the run did since its last checkpoint: 15 min < the 900 s cadence
    assert nine.productive_estimated and nine.productive == pytest.approx(nine.allocated - 8 * 15 / 60)
    assert ten.productive == pytest.approx(ten.allocated)


def test_the_sources_page_shows_the_watchers_runs_and_where_it_resumes(bound, admin_client):
    bad = wl("u-bad", "vision", "10", RUNNING, gpus=2)
    bad["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["nvidia.com/gpu"] = "two"
    with WatchScriptServer([list_step([bad], "77")]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        usage_resync_kueue(cluster=bound.cluster)
    page = admin_client.get("/usage/sources/").content.decode()
    assert "Kueue Workloads" in page and "resumes from resourceVersion 77" in page
    assert "ADDED vision/job-u-bad:" in page and "is not a Kubernetes quantity" in page


def test_a_multikueue_managers_copy_on_a_worker_is_not_charged_twice(bound):
    """MultiKueue labels the Workload it creates in a worker with kueue.x-k8s.io/multikueue-origin: that is
    the manager's, charged there; the worker's own Workload beside it is charged as always (issue #30.5)."""
    mirrored = wl("u-copy", "vision", "10", RUNNING, gpus=8)
    mirrored["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] = "multikueue"
    own = wl("u-own", "vision", "10", RUNNING, gpus=2)
    with WatchScriptServer([list_step([mirrored, own], "10")]) as server:
        bound.cluster.connection_ref = f"url:{server.url}"
        run = usage_resync_kueue(cluster=bound.cluster)
    assert run.status == SourceStatus.OK and run.counts["mirrored_from_manager"] == 1
    assert set(WorkloadRecord.objects.values_list("scheduler_id", flat=True)) == {"u-own"}
