"""A GPU-hour budget on the real local Slurm stack: the QOS of the budget's subtree get ``Flags=NoDecay``
and ``GrpTRESMins``, Allot zeroes their usage when the period starts, a second sync writes nothing, and
once the budget is spent a real job pends with Slurm's own reason."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from accounting.models import UsageHour
from accounting.services.budgets import budgets_evaluate
from quotas import services
from quotas.integrations.slurm import Sacctmgr
from quotas.models import BudgetSpend, SyncStatus
from quotas.services import BudgetChange
from quotas.services.sync import cluster_sync
from tests.quotas.test_slurm_clusters import two as two
from tests.quotas.test_slurm_sync import _sh, _wait
from tests.quotas.test_slurm_sync import lab as lab

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def _qos(name):
    (found,) = [q for q in Sacctmgr().read_qos() if q.name == name]
    return found


def _reason(job):
    return _sh("squeue", "-h", "-j", job, "-o", "%r").stdout.strip()


def test_a_hold_budget_is_enforced_by_slurm_itself(lab):
    for name, priority in (("P0", 100000), ("P1", 1000)):
        services.tier_set(actor=lab.admin, reason="t", name=name, display_name=name, priority=priority)
    services.budget_set(
        actor=lab.admin,
        reason="vision's monthly A100 hours",
        change=BudgetChange(lab.vision.pk, lab.slurm_flavor.pk, device_hours=3, action="hold", tiers=["P0", "P1"]),
    )
    first = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert first.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), first.message
    for name in ("guar-vision", "burst-vision"):
        qos = _qos(name)
        assert "nodecay" in qos.flags and qos.grp_tres_mins == {"gres/gpu:a100": 180}, qos
    assert _qos("guar-nlp").grp_tres_mins == {} and "nodecay" not in _qos("guar-nlp").flags

    # the first evaluation opens the period; the next sync zeroes Slurm's usage of the QOS and says so
    budgets_evaluate()
    spend = BudgetSpend.objects.get()
    assert spend.reset_at is None
    reset = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert "budget usage reset on 2 QOS" in reset.message, reset.message
    spend.refresh_from_db()
    assert spend.reset_at is not None
    again = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert again.status == SyncStatus.IN_SYNC and again.counts["planned_calls"] == 0, again.message

    # vision spends its budget (rollups before the reset: Slurm's QOS counted none of it)
    now = timezone.now()
    hour = max(spend.period_start, now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1))
    UsageHour.objects.create(unit=lab.vision, flavor=lab.slurm_flavor, hour=hour, minutes=60, allocated=4, within=4)
    result = budgets_evaluate()
    assert result["exhausted"] == 1
    spent = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert spent.status == SyncStatus.APPLIED, spent.message
    assert "held: budget spent — acme/research/vision on slurm-lab/a100" in spent.message
    assert _qos("guar-vision").grp_tres_mins == {"gres/gpu:a100": 0}

    job = None
    try:
        for _ in range(20):  # slurmctld learns the QOS change from slurmdbd within a moment
            done = _sh("sbatch", "-H", "-t", "5", "--chdir=/tmp", "-o", "/dev/null", "-A", "vision",
                       "--gres=gpu:a100:1", "--wrap", "sleep 30", user="bob")  # fmt: skip
            assert done.returncode == 0, done.stderr
            job = done.stdout.split()[-1]
            _sh("scontrol", "release", job)
            time.sleep(2)
            reason = _reason(job)
            if "Min" in reason:
                break
            _sh("scancel", job)
            _wait(job, {""}, seconds=30)
            job = None
        assert job is not None, "the job never pended on the budget"
        assert reason.startswith("QOSGrp") and "Min" in reason, reason
        assert _sh("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "PENDING"
    finally:
        if job:
            _sh("scancel", job)


def test_a_spent_deny_budget_is_refused_by_job_submit_naming_it(lab):
    from pathlib import Path

    from quotas.services.slurm_policy import slurm_policy_publish

    services.tier_set(actor=lab.admin, reason="t", name="P1", display_name="P1", priority=1000)
    services.budget_set(
        actor=lab.admin,
        reason="t",
        change=BudgetChange(lab.vision.pk, lab.slurm_flavor.pk, device_hours=2, action="deny", tiers=["P1"]),
    )
    now = timezone.now()
    hour = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=2))
    UsageHour.objects.create(
        unit=lab.vision, flavor=lab.slurm_flavor, hour=hour.replace(minute=0, second=0, microsecond=0),
        minutes=60, allocated=3, within=2, borrowed=1,
    )  # fmt: skip
    assert budgets_evaluate()["exhausted"] == 1  # 2 + 0.5 × 1 = 2.5 of 2
    run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert "denied: budget spent — acme/research/vision on slurm-lab/a100" in run.message, run.message
    policy = slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    assert (
        "has spent its month a100 GPU budget (2 of 2 device-hours)"
        in policy["accounts"]["vision"]["budget_denied"]["a100"]
    )
    assert "budget_denied" not in policy["accounts"]["nlp"]
    assert _sh("bash", "deploy/slurm/install-job-submit.sh").returncode == 0
    for _ in range(12):  # job_submit.lua looks for a new snapshot every 10 s
        done = _sh("sbatch", "-H", "-t", "5", "--chdir=/tmp", "-o", "/dev/null", "-A", "vision",
                   "--gres=gpu:a100:1", "--wrap", "true", user="bob")  # fmt: skip
        if done.returncode != 0:
            break
        _sh("scancel", done.stdout.split()[-1])
        time.sleep(1)
    assert done.returncode != 0
    assert "account vision: acme/research/vision has spent its month a100 GPU budget" in done.stderr, done.stderr
    assert "refused until" in done.stderr and "raised in Allot" in done.stderr
    other = _sh("sbatch", "-H", "-t", "5", "--chdir=/tmp", "-o", "/dev/null", "-A", "nlp",
                "--gres=gpu:a100:1", "--wrap", "true", user="alice")  # fmt: skip
    assert other.returncode == 0, other.stderr
    _sh("scancel", other.stdout.split()[-1])


def test_a_budget_on_a_second_cluster_of_the_slurmdbd_resets_only_its_own_qos(two):
    """QOS are shared by every cluster of a slurmdbd: the RawUsage reset names only the QOS this
    cluster's sync compiled (its prefix), and the first cluster's objects stay byte for byte."""
    from quotas.services.sync import slurm_sync
    from tests.quotas.test_slurm_clusters import _give_other_quota, _seen

    class Recording(Sacctmgr):
        def __init__(self) -> None:
            super().__init__()
            self.writes: list[tuple[str, ...]] = []

        def write(self, argv):
            self.writes.append(argv)
            return super().write(argv)

    services.tier_set(actor=two.admin, reason="t", name="P1", display_name="P1", priority=1000)
    assert cluster_sync(actor=two.admin, reason="lab", cluster=two.slurm).status in ("applied", "in_sync")
    lab_before = _seen("lab")
    two.other = services.cluster_set(actor=two.admin, reason="t", name="slurm-other", slurm_qos_prefix="o-")
    _give_other_quota(two)
    services.budget_set(
        actor=two.admin,
        reason="t",
        change=BudgetChange(two.nlp.pk, two.other_flavor.pk, device_hours=50, action="hold", tiers=["P1"]),
    )
    budgets_evaluate()
    runner = Recording()
    run = slurm_sync(actor=two.admin, reason="other", cluster=two.other, runner=runner)
    assert run.status == SyncStatus.APPLIED, run.message
    (reset,) = [argv for argv in runner.writes if "RawUsage=0" in argv]
    assert reset[:3] == ("modify", "qos", "where") and reset[3] == "name=o-burst-nlp,o-guar-nlp", reset
    assert _qos("o-guar-nlp").grp_tres_mins == {"gres/gpu:h100": 50 * 60}
    assert _seen("lab") == lab_before and "nodecay" not in _qos("guar-nlp").flags
