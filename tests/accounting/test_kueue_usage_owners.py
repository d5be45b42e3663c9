"""Issue #25: Kueue usage lands on the right flavor and owner, and the watcher is live and stops
cleanly. Exchanges in the API server's wire format (tests/kube_watch.py)."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from accounting.models import Allocation, SourceRun, WorkloadRecord
from accounting.services.kueue import usage_resync_kueue, usage_watch_kueue
from quotas import services
from quotas.integrations.kubernetes import KueueClient, api_client_for
from tests.accounting.test_kueue_usage import PREEMPTED, READMITTED, RUNNING, STATS, at, wl
from tests.kube_watch import WatchScriptServer, list_step, watch_step

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
JOB_UID = "0d0e4a7c-5b1f-4f38-9a47-0c1e2d3f4a5b"


@pytest.fixture
def bound(org):
    services.namespace_bind(actor=org.admin, reason="test", unit=org.vision, cluster=org.cluster, namespace="vision")
    org.big = services.flavor_set(
        actor=org.admin, reason="t", cluster=org.cluster, name="a100-80gb", accelerator_model="A100",
        device_memory_gb=80, physical_devices=16,
    )  # fmt: skip
    services.tier_set(actor=org.admin, reason="t", name="P2", display_name="Interactive", priority=1000)
    return org


def connect(org, server):
    org.cluster.connection_ref = f"url:{server.url}"
    org.cluster.save()
    return KueueClient(api_client_for(org.cluster.connection_ref))


def test_each_admission_period_is_charged_to_its_own_flavor(bound):
    """Admitted on a100 (8), preempted, re-admitted on a100-80gb (4): each run keeps its flavor."""
    steps = [
        list_step([wl("u-move", "vision", "10", RUNNING, gpus=8, flavor="a100")], "10"),
        list_step([wl("u-move", "vision", "11", PREEMPTED, **STATS)], "11"),
        list_step([wl("u-move", "vision", "12", READMITTED, gpus=4, flavor="a100-80gb", **STATS)], "12"),
    ]
    with WatchScriptServer(steps) as server:
        connect(bound, server)
        for _ in steps:
            usage_resync_kueue(cluster=bound.cluster)
    assert server.mismatches == []
    held = [(a.start, a.flavor.name if a.flavor else None, a.devices) for a in Allocation.objects.order_by("start")]
    assert held == [(at(5), "a100", 8), (at(30), "a100-80gb", 4)]
    record = WorkloadRecord.objects.get(scheduler_id="u-move")
    assert record.flavor == bound.big  # the record says where it runs now


def kueue_made(uid, version, *, owner=True):
    """A Workload as Kueue creates it for a Job without labelKeysToCopy: no allot labels, v1beta2's
    priorityClassRef, the Job as controller, Kueue's job-uid label."""
    obj = wl(uid, "vision", version, RUNNING, gpus=2)
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": JOB_UID}
    obj["spec"]["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "allot-p2"}
    if owner:
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID, "controller": True}
        ]
    return obj


def job_step(labels):
    return {
        "request": {"path": "/apis/batch/v1/namespaces/vision/jobs/train", "query": {}},
        "status": 200,
        "body": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "labels": labels}},
    }


def test_owner_project_and_tier_come_from_the_owning_job_when_the_workload_lacks_them(bound):
    labels = {"allot.dev/owner": "bob", "allot.dev/project": "detect", "allot.dev/tier": "P1"}
    steps = [list_step([kueue_made("u-job", "10"), kueue_made("u-orphan", "11", owner=False)], "11"), job_step(labels)]
    with WatchScriptServer(steps) as server:
        connect(bound, server)
        run = usage_resync_kueue(cluster=bound.cluster)
    assert server.mismatches == [] and server.served == 2, server.mismatches  # the Job read once
    made = WorkloadRecord.objects.get(scheduler_id="u-job")
    assert (made.owner, made.project, made.tier) == ("bob", "detect", "P1")
    orphan = WorkloadRecord.objects.get(scheduler_id="u-orphan")  # no job to ask: its class says the tier
    assert (orphan.owner, orphan.tier) == ("", "P2")
    assert run.counts["owner_lookups"] == 1


def test_the_owning_job_is_read_once_per_watch_not_at_every_event_of_its_workload(bound):
    """Issue #40.7: a Job without Allot's labels left its Workload without an owner, so each later event of that
    Workload read the Job again; now once per watch session (a second GET is not in the script: a mismatch)."""
    again = kueue_made("u-job", "12")
    again["status"]["conditions"].append({"type": "PodsReady", "status": "True", "reason": "Started"})
    steps = [
        list_step([kueue_made("u-job", "10")], "10"),
        job_step({"team": "vision"}),  # no owner labels on the Job either
        watch_step("10", [{"type": "MODIFIED", "object": again}], end="close", timeout=300),
    ]
    with WatchScriptServer(steps) as server:
        client = connect(bound, server)
        runs = usage_watch_kueue(cluster=bound.cluster, client=client, flush_seconds=0.1, max_watches=1)
    assert server.mismatches == [] and server.served == 3, server.mismatches
    assert sum(r.counts.get("owner_lookups", 0) for r in runs) == 1


def test_a_workload_with_copied_labels_needs_no_lookup(bound):
    copied = kueue_made("u-copied", "10")
    copied["metadata"]["labels"].update({"allot.dev/owner": "ada", "allot.dev/project": "p", "allot.dev/tier": "P2"})
    with WatchScriptServer([list_step([copied], "10")]) as server:
        connect(bound, server)
        usage_resync_kueue(cluster=bound.cluster)
    assert server.mismatches == [] and server.served == 1
    assert WorkloadRecord.objects.get(scheduler_id="u-copied").owner == "ada"


@pytest.mark.django_db(transaction=True)
def test_the_last_event_of_a_burst_is_written_without_waiting_for_another_and_stop_is_prompt(bound):
    finished = wl("u-done", "vision", "21", [*RUNNING, ("Finished", "True", "Succeeded", 9)], gpus=2)
    steps = [
        list_step([wl("u-done", "vision", "20", RUNNING, gpus=2)], "20"),
        watch_step("20", [{"type": "MODIFIED", "object": finished}], end="hold", timeout=60),
    ]
    stopping = threading.Event()
    with WatchScriptServer(steps) as server:
        client = connect(bound, server)
        runs: list[SourceRun] = []
        thread = threading.Thread(
            target=lambda: runs.extend(
                usage_watch_kueue(
                    cluster=bound.cluster, client=client, timeout_seconds=60, flush_seconds=0.5,
                    stop=stopping.is_set, max_watches=1,
                )
            )
        )  # fmt: skip
        thread.start()
        deadline = time.monotonic() + 20
        while WorkloadRecord.objects.filter(scheduler_id="u-done", state="finished").count() == 0:
            assert time.monotonic() < deadline, "the finished Workload was not written while the watch stayed quiet"
            time.sleep(0.2)
        asked = time.monotonic()
        stopping.set()
        thread.join(timeout=10)
        assert not thread.is_alive()
        took = time.monotonic() - asked
    assert took < 5  # not a timing benchmark: the watch holds for 60 s, a stop that waited for it would hang
    assert runs[-1].cursor == "21"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_sigterm_ends_the_watch_command_with_its_cursor_stored(bound):
    from tests.quotas.test_tasks import _test_database_url

    steps = [
        list_step([wl("u-run", "vision", "30", RUNNING, gpus=2)], "30"),
        watch_step("30", [{"type": "MODIFIED", "object": copy.deepcopy(wl("u-run", "vision", "31", RUNNING, gpus=2))}],
                   end="hold", timeout=120),
    ]  # fmt: skip
    with WatchScriptServer(steps) as server:
        connect(bound, server)
        env = {**os.environ, "DATABASE_URL": _test_database_url()}
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "allot_watch_kueue", "--cluster", bound.cluster.name,
             "--timeout-seconds", "120"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not SourceRun.objects.filter(cluster=bound.cluster, name="watch", cursor="31").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)  # the Deployment would SIGKILL it at 30 s
        finally:
            proc.kill()
    assert code == 0, proc.stdout.read() if proc.stdout else ""
    run = SourceRun.objects.filter(cluster=bound.cluster, name="watch").latest("id")
    assert run.cursor == "31" and run.status != "running"


def _rolled(org, T0):
    from accounting.models import UsageHour

    fields = ("unit_id", "flavor_id", "hour", "minutes", "guarantee", "allocated", "within", "borrowed", "productive")
    return sorted(
        tuple(round(v, 9) if isinstance(v, float) else v for v in row)
        for row in UsageHour.objects.filter(hour__gte=T0).values_list(*fields)
    )


def test_on_sqlite_kueue_and_slurm_usage_reach_the_rollups_too(bound):
    """Issue #25.5: the allocations part of the rollup is computed on SQLite (the demo) as well: the
    Kueue script's runs give the hours the PostgreSQL statement gives (pinned in test_kueue_usage)."""
    from datetime import timedelta

    from accounting.models import UsageHour
    from accounting.services import usage_rollup
    from tests.accounting.test_kueue_usage import T0, script, watch

    with WatchScriptServer(script()) as server:
        watch(bound, server, watches=4)
    usage_rollup(start=T0, end=T0 + timedelta(hours=2))
    hours = {h.hour: h for h in UsageHour.objects.filter(unit=bound.vision, flavor=bound.flavor)}
    nine, ten = hours[T0], hours[T0 + timedelta(hours=1)]
    assert nine.allocated == pytest.approx(8 * 15 / 60 + 4 * 30 / 60) and ten.allocated == pytest.approx(4 * 10 / 60)
    assert (nine.guarantee, ten.guarantee, nine.minutes) == (20, 20, 60)
    assert nine.productive == pytest.approx(nine.allocated - 8 * 15 / 60) and nine.productive_estimated


@pytest.mark.postgres
def test_the_python_rollup_of_allocations_gives_the_rows_the_postgresql_statement_gives(bound):
    from datetime import timedelta

    from django.utils import timezone

    from accounting.models import UsageHour
    from accounting.services import usage_rollup
    from accounting.services.rollup_allocations import allocation_rows
    from tests.accounting.test_kueue_usage import T0, script, watch

    with WatchScriptServer(script()) as server:
        watch(bound, server, watches=4)
    now = timezone.now()
    usage_rollup(start=T0, end=T0 + timedelta(hours=3), now=now)  # the SQL statement
    by_sql = _rolled(bound, T0)
    UsageHour.objects.filter(hour__gte=T0).delete()
    UsageHour.objects.bulk_create(allocation_rows(T0, T0 + timedelta(hours=3), now))
    assert _rolled(bound, T0) == by_sql and by_sql
