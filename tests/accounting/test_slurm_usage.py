"""Usage from a real Slurm (the local stack): real jobs — completed, failed, cancelled, requeued — read
back through sacct, each recorded once with its account, QOS, GPUs and times; a second ingest changes
nothing; a failing sacct leaves earlier data alone and the next run resumes from the watermark."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from accounting.models import Allocation, SourceStatus, UsageHour, WorkloadRecord
from accounting.services import usage_ingest_slurm, usage_rollup
from quotas.integrations.slurm import Sacct
from quotas.services.sync import cluster_sync
from tests.quotas import test_slurm_sync
from tests.quotas.test_slurm_sync import _sh, _wait

pytestmark = [pytest.mark.slurm, pytest.mark.postgres, pytest.mark.django_db]
lab = test_slurm_sync.lab  # the same tree, on the local Slurm cluster "lab"


def sbatch(user, account, gpus, command, *extra):
    """Submit as ``user``. Right after a sync, slurmctld may not have the new associations yet (slurmdbd
    pushes them asynchronously): that one refusal is retried briefly. (A member who was no Unix user when
    the sync ran is refused for good: the ``lab`` fixture creates them first.)"""
    deadline = time.monotonic() + 20
    while True:
        done = _sh(
            "sbatch", "-A", account, f"--gres=gpu:a100:{gpus}", "-t", "5", "--chdir=/tmp", "-o", "/dev/null",
            *extra, "--wrap", command, user=user,
        )  # fmt: skip
        if done.returncode == 0 or "Invalid account" not in done.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def _accounted(job):
    """sacct, asked for a time window as the ingest asks, lists the job's final run (slurmdbd records a
    requeued job's last run a little after it ends)."""
    listed = _sh(
        "sacct", "-n", "-X", "-D", "-P", "-a", "--starttime=now-1hour", "--endtime=now+1minute", "-o", "JobIDRaw,State"
    ).stdout.splitlines()
    states = [line.split("|")[1].split()[0] for line in listed if line.startswith(f"{job}|")]
    return bool(states) and states[-1] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def wait_until_finished(*jobs):
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        states = [_sh("squeue", "-h", "-j", j, "-o", "%T").stdout.strip() for j in jobs]
        if not any(states) and all(_accounted(j) for j in jobs):
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs {jobs} still queued or running")


def test_real_jobs_are_recorded_once_with_their_account_qos_gpus_and_times(lab):
    cluster_sync(actor=lab.admin, reason="accounts first", cluster=lab.slurm)
    _sh("scancel", "-u", "alice")
    _sh("scancel", "-u", "bob")
    begin = timezone.now() - timedelta(seconds=5)
    completed = sbatch("alice", "nlp", 1, "sleep 1")
    failed = sbatch("bob", "vision", 1, "false")
    wait_until_finished(completed, failed)
    cancelled = sbatch("alice", "nlp", 1, "sleep 60")  # one at a time: the lab node is small
    assert _wait(cancelled, {"RUNNING"})
    time.sleep(2)
    _sh("scancel", cancelled, check=True)
    wait_until_finished(cancelled)
    requeued = sbatch("alice", "nlp", 2, 'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 60; fi')
    assert _wait(requeued, {"RUNNING"})
    assert _sh("scontrol", "requeue", requeued).returncode == 0  # evicted mid-run
    time.sleep(1)
    assert _wait(requeued, {"PENDING"})
    _sh("scontrol", "update", f"jobid={requeued}", "StartTime=now", check=True)  # not the few minutes Slurm holds it
    wait_until_finished(requeued)  # its second run starts again and ends

    # a first run whose sacct fails: recorded as failed, nothing written
    broken = usage_ingest_slurm(cluster=lab.slurm, runner=Sacct(binary="/nonexistent/sacct"))
    assert broken.status == SourceStatus.FAILED and "not installed" in broken.message
    assert not WorkloadRecord.objects.exists()

    run = usage_ingest_slurm(cluster=lab.slurm, now=timezone.now() + timedelta(minutes=1))
    assert run.status == SourceStatus.OK, (run.message, run.problems)
    assert run.window_start is not None and run.watermark is not None
    assert run.window_start <= begin  # no earlier successful watermark: the lookback window
    mine = WorkloadRecord.objects.filter(
        job_id__in=[completed, failed, cancelled, requeued], submitted_at__gte=begin - timedelta(minutes=1)
    )  # job ids repeat when the local stack is started afresh: only this test's jobs
    records = {r.job_id: r for r in mine}
    assert set(records) == {completed, failed, cancelled, requeued}, "each job once"
    ok = records[completed]
    assert (ok.unit, ok.owner, ok.state, ok.devices, ok.flavor) == (lab.nlp, "alice", "finished", 1, lab.slurm_flavor)
    assert ok.submitted_at and ok.admitted_at and ok.ended_at
    assert ok.tier.startswith("guar-") and ok.submitted_at <= ok.admitted_at <= ok.ended_at
    assert (
        records[failed].state == "failed" and records[failed].unit == lab.vision and records[failed].exit_code != "0:0"
    )
    assert records[cancelled].state == "cancelled" and records[cancelled].held_seconds >= 2
    evicted = records[requeued]
    assert evicted.state == "finished" and evicted.devices == 2
    assert [e["reason"] for e in evicted.evictions] == ["REQUEUED"] and evicted.allocations.count() == 2

    before = {k: (r.state, r.devices, r.held_seconds) for k, r in records.items()}
    again = usage_ingest_slurm(cluster=lab.slurm, now=timezone.now() + timedelta(minutes=2))
    assert again.watermark and again.window_start == run.watermark - timedelta(hours=1)  # from the watermark
    again_mine = WorkloadRecord.objects.filter(job_id__in=before, submitted_at__gte=begin - timedelta(minutes=1))
    assert {r.job_id: (r.state, r.devices, r.held_seconds) for r in again_mine} == before
    assert again_mine.count() == 4

    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    usage_rollup(start=hour, end=hour + timedelta(hours=3))
    window = (hour, hour + timedelta(hours=3))  # every nlp run the ingest read (the lab's earlier jobs too)
    held = (
        sum(
            a.devices * max(0.0, (min(a.end or window[1], window[1]) - max(a.start, window[0])).total_seconds())
            for a in Allocation.objects.filter(unit=lab.nlp, flavor=lab.slurm_flavor)
        )
        / 3600
    )
    assert held >= sum(r.devices * r.held_seconds for r in records.values() if r.unit == lab.nlp) / 3600
    rolled = sum(UsageHour.objects.filter(unit=lab.nlp, flavor=lab.slurm_flavor).values_list("allocated", flat=True))
    assert rolled == pytest.approx(held, abs=2 / 3600)  # whole seconds
    for row in UsageHour.objects.filter(unit=lab.nlp, flavor=lab.slurm_flavor, hour__lt=again.watermark):
        assert row.guarantee == pytest.approx(4 * row.minutes / 60)  # nlp's guarantee, for what was covered
        assert row.minutes == 60 or row.hour > again.watermark - timedelta(hours=1)
