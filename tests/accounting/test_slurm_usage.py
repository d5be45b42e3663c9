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
from accounting.services.fairshare import slurm_fairshare
from quotas.integrations.slurm import Sacct
from quotas.services.sync import cluster_sync
from tests.quotas import test_slurm_sync
from tests.quotas.policy.test_fairshare import parse_sshare
from tests.quotas.test_slurm_sync import _sh, _wait

pytestmark = [pytest.mark.slurm, pytest.mark.postgres, pytest.mark.django_db]
lab = test_slurm_sync.lab  # the same tree, on the local Slurm cluster "lab"


def sbatch(user, account, gpus, command, *extra):
    """Submit as ``user``. Right after a sync, slurmctld may not have the new associations yet (slurmdbd
    pushes them asynchronously), and job_submit.lua may still hold an earlier tree's snapshot (it looks
    for the one the ``lab`` fixture published every 10 s): those refusals are retried briefly. (A member
    who was no Unix user when the sync ran is refused for good: the ``lab`` fixture creates them first.)"""
    deadline = time.monotonic() + 25
    while True:
        done = _sh(
            "sbatch", "-A", account, f"--gres=gpu:a100:{gpus}", "-t", "5", "--chdir=/tmp", "-o", "/dev/null",
            *extra, "--wrap", command, user=user,
        )  # fmt: skip
        transient = "Invalid account" in done.stderr or "Allot:" in done.stderr
        if done.returncode == 0 or not transient or time.monotonic() > deadline:
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


def _sshare():
    return parse_sshare(_sh("sshare", "-a", "-l", "-P", check=True).stdout)


def test_fair_share_from_ingested_jobs_is_what_sshare_prints(lab):
    """Issue #16.8: after a usage reset, real jobs — alice (2 GPUs) and dave (1 GPU, on nlp's burst QOS
    whose UsageFactor is 0.5) in nlp, bob in vision — ingested with sacct and put through Allot's Fair
    Tree give, for every association on the cluster, the NormShares, EffectvUsage, LevelFS and FairShare
    that sshare prints. The tree is read from sshare (what the cluster has); the usage is Allot's."""
    cluster_sync(actor=lab.admin, reason="accounts first", cluster=lab.slurm)
    for user in ("alice", "bob", "dave"):
        _sh("scancel", "-u", user)
    _sh("sacctmgr", "-i", "modify", "account", "where", "name=root", "cluster=lab", "set", "RawUsage=0", check=True)
    since = timezone.now().replace(microsecond=0)  # Slurm's times are whole seconds
    # as users submit: no --mem (DefMemPerCPU gives 1000M), so slurmctld bills 1 CPU + 1000M × 0.25/GB +
    # 10 per GPU = 21.244 for alice while sacct prints billing=21: Allot bills from AllocTRES × the
    # partition's TRESBillingWeights, as slurmctld does (issue #24.6)
    jobs = [
        sbatch("alice", "nlp", 2, "sleep 20"),
        sbatch("dave", "nlp", 1, "sleep 20", "--qos=burst-nlp"),
        sbatch("bob", "vision", 1, "sleep 30"),
    ]
    wait_until_finished(*jobs)
    assert usage_ingest_slurm(cluster=lab.slurm, now=timezone.now() + timedelta(minutes=1)).status == SourceStatus.OK
    report = slurm_fairshare(cluster=lab.slurm, since=since)
    assert report.jobs == 3
    ours = {(line.account, line.user): line for line in report.lines}
    records = WorkloadRecord.objects.filter(cluster=lab.slurm, submitted_at__gte=since)
    billed = dict(records.values_list("owner", "billing"))
    assert billed["alice"] == pytest.approx(1 + 1000 * 0.25 / 1024 + 20, abs=1e-9)  # not sacct's 21
    assert ours[("nlp", "dave")].usage == pytest.approx(ours[("nlp", "alice")].usage * 11.244 / 21.244 / 2, rel=0.1)

    # A job's usage reaches RawUsage when it ends; the normalised figures (NormUsage, EffectvUsage,
    # LevelFS, FairShare) only at slurmctld's next decay pass (PriorityCalcPeriod, a minute here): wait
    # for a pass that saw every job's usage, where each NormUsage is its RawUsage over root's.
    deadline = time.monotonic() + 180
    while True:
        rows = _sshare()
        raw = {key: float(f["RawUsage"] or 0) for key, _, f in rows}
        total = sum(raw[key] for key, parent, _ in rows if parent is None)
        charged = all(raw.get(key, 0) > 0 for key in (("nlp", "alice"), ("nlp", "dave"), ("vision", "bob")))
        settled = total > 0 and all(abs(float(f["NormUsage"] or 0) - raw[key] / total) < 2e-3 for key, _, f in rows)
        if charged and settled:
            break
        assert time.monotonic() < deadline, f"sshare has not charged the jobs: {rows}"
        time.sleep(2)
    accounts = [
        (key[1], parent[1] if parent else "root", float(f["RawShares"])) for key, parent, f in rows if not f["User"]
    ]
    users = [(key[1], key[0], float(f["RawShares"])) for key, _, f in rows if f["User"]]
    live = slurm_fairshare(cluster=lab.slurm, now=report.at, since=since, tree=(accounts, users))
    lines = {(line.account, line.user) if line.user else ("acct", line.account): line for line in live.lines}
    assert set(lines) == {key for key, _, _ in rows}, "every association sshare prints, and only those"
    for key, _, f in rows:
        line = lines[key]
        assert line.norm_shares == pytest.approx(float(f["NormShares"]), abs=1e-6), key
        # issue #16.8: within 1e-3 (both count from slurmctld's whole-second start and end times)
        assert line.effective_usage == pytest.approx(float(f["EffectvUsage"]), abs=1e-3), key
        level = None if f["LevelFS"] == "inf" else float(f["LevelFS"])
        assert (line.level_fs is None) == (level is None), key
        if level is not None:
            assert line.level_fs == pytest.approx(level, rel=1e-3), key
        if f["User"]:
            assert line.factor == pytest.approx(float(f["FairShare"]), abs=1e-6), key
    # vision used less than nlp for equal shares: bob ranks first; dave, at half price, before alice
    factors = {key: float(f["FairShare"]) for key, _, f in rows if f["User"] and key[0] != "root"}
    assert factors[("vision", "bob")] > factors[("nlp", "dave")] > factors[("nlp", "alice")]
