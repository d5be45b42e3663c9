"""MIG slices on the real Slurm stack (issue #45.6): an H100 MIG flavor whose profiles are GPU types of their own
(``h100-mig_1g.10gb``, ``h100-mig_3g.40gb``: fake devices in gres.conf, deploy/slurm/local-slurm.sh), compiled
from GPU-equivalents. Jobs within the equivalents run, one slice more waits on the QOS, a job that could never
fit is refused at submission — by count per profile and, mixing profiles, by weight — and sacct counts what ran."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quotas import services
from quotas.models import AuditEvent
from quotas.policy import Resource
from quotas.services.slurm_policy import slurm_policy_publish
from quotas.services.sync import cluster_sync
from tests.quotas.test_slurm_ceilings import SBATCH
from tests.quotas.test_slurm_sync import _sh, _state, _wait
from tests.quotas.test_slurm_sync import lab as lab

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]
ONE_G, THREE_G = "h100-mig_1g.10gb", "h100-mig_3g.40gb"


@pytest.fixture
def sliced(lab):
    """lab's tree, plus an H100 MIG flavor (1g.10gb, 3g.40gb) where vision holds 1 GPU-equivalent, no burst."""
    flavor = services.flavor_set(
        actor=lab.admin,
        reason="inference slices",
        cluster=lab.slurm,
        name="h100-mig",
        accelerator_model="NVIDIA H100 80GB HBM3",
        device_memory_gb=80,
        physical_devices=2,
        sharing="mig",
        mig_profiles=["1g.10gb", "3g.40gb"],
    )
    for level in ((lab.acme, 2), (lab.research, 1), (lab.vision, 1)):
        change = services.QuotaChange(level[0].pk, flavor.pk, Resource.GPU, level[1], 0, 0)
        services.quota_set_bulk(actor=lab.admin, reason="t", changes=[change])
    run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert run.status in ("applied", "in_sync"), run.message
    policy = slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    assert policy["accounts"]["vision"]["gpus"][ONE_G] == 7 and policy["accounts"]["vision"]["equivalents"] == {
        "h100-mig": 1
    }
    assert _sh("bash", "deploy/slurm/install-job-submit.sh").returncode == 0
    lab.jobs = []
    time.sleep(2)
    yield lab
    for job in lab.jobs:
        _sh("scancel", job)
    for job in lab.jobs:
        _wait(job, {""}, seconds=60)


def _submit(lab, *gres, wrap="sleep 120"):
    done = _sh(*SBATCH, "-A", "vision", f"--gres={','.join(gres)}", "--wrap", wrap, user="bob")
    if done.returncode == 0:
        job = done.stdout.split()[-1]
        lab.jobs.append(job)
        _sh("scontrol", "release", job)
    return done


def _qos_tres(name: str) -> str:
    return _sh("sacctmgr", "-n", "-P", "show", "qos", name, "format=GrpTRES").stdout.strip()


def test_slices_run_within_the_equivalents_and_wait_or_are_refused_beyond_them(sliced):
    # Allot's QOS, as slurmdbd holds them: 1 equivalent = 7 × 1g.10gb or 2 × 3g.40gb
    grp = _qos_tres("guar-vision")
    assert f"gres/gpu:{ONE_G}=7" in grp and f"gres/gpu:{THREE_G}=2" in grp, grp
    # refused at submission: more slices of one profile than the equivalent holds, or a mix weighing more
    eight = _submit(sliced, f"gpu:{ONE_G}:8")
    assert eight.returncode != 0 and "8 H100-MIG_1G.10GB GPUs is more than account vision" in eight.stderr
    mixed = _submit(sliced, f"gpu:{ONE_G}:4", f"gpu:{THREE_G}:1")  # 4/7 + 1/2
    assert mixed.returncode != 0, mixed.stdout
    assert "MIG slices weighing 1.07 GPU-equivalents of H100-MIG are more than account vision" in mixed.stderr
    # seven 1g.10gb slices: the whole equivalent, running
    seven = _submit(sliced, f"gpu:{ONE_G}:7")
    assert seven.returncode == 0, seven.stderr
    assert _wait(sliced.jobs[-1], {"RUNNING"}), _state(sliced.jobs[-1])
    # one slice more waits on the guarantee QOS — Slurm's own count of the profile
    more = _submit(sliced, f"gpu:{ONE_G}:1")
    assert more.returncode == 0, more.stderr
    time.sleep(12)  # a scheduling pass
    shown = _sh("scontrol", "show", "job", sliced.jobs[-1]).stdout
    assert "JobState=PENDING" in shown and "Reason=QOSGrpGRES" in shown, shown
    # what ran, as sacct counts it: seven slices of the profile, and seven gres/gpu
    alloc = _sh("sacct", "-n", "-P", "-X", "-j", sliced.jobs[-2], "-o", "AllocTRES").stdout
    assert f"gres/gpu:{ONE_G}=7" in alloc and "gres/gpu=7" in alloc, alloc
    # the seven end: the waiting slice runs
    _sh("scancel", sliced.jobs[-2])
    assert _wait(sliced.jobs[-1], {"RUNNING"}), _state(sliced.jobs[-1])


def test_two_halves_fill_the_equivalent_and_a_third_waits(sliced):
    halves = _submit(sliced, f"gpu:{THREE_G}:2")
    assert halves.returncode == 0, halves.stderr
    assert _wait(sliced.jobs[-1], {"RUNNING"}), _state(sliced.jobs[-1])
    third = _submit(sliced, f"gpu:{THREE_G}:1")
    assert third.returncode == 0, third.stderr
    time.sleep(12)
    shown = _sh("scontrol", "show", "job", sliced.jobs[-1]).stdout
    assert "JobState=PENDING" in shown and "Reason=QOSGrpGRES" in shown, shown
    assert AuditEvent.objects.filter(action="flavor_set", object_repr="slurm-lab/h100-mig").exists()


def test_slices_that_ran_are_charged_in_gpu_equivalents_as_slurm_bills_them(sliced):
    """Issue #45.5 on the real Slurm: two 3g.40gb slices that ran are read back through sacct as 2 slices weighing
    1 GPU-equivalent, billed per second as slurmctld bills them with the partition's TRESBillingWeights set as Allot
    proposes (each GPU type its weight × 10; set live with scontrol, the stack's own weights put back after) — and the
    usage Allot's Fair Tree charges the account is the RawUsage sshare prints."""
    from datetime import timedelta

    from django.utils import timezone

    from accounting.models import SourceStatus
    from accounting.services import usage_ingest_slurm
    from quotas.selectors import slurm_desired
    from tests.accounting.test_slurm_usage import wait_until_finished

    # the partition billed as Allot proposes (the API's slurm view, per flavor): each GPU type its weight × 10
    shown = _sh("scontrol", "show", "partition", "gpu", "-o", check=True).stdout
    before = shown.split("TRESBillingWeights=", 1)[1].split()[0]
    gres = [
        part for text in slurm_desired(sliced.slurm).billing.values() for part in text.split(",") if "GRES/" in part
    ]
    proposed = ",".join(["CPU=1.0", "Mem=0.25G", *gres])
    assert f"GRES/gpu:{THREE_G}=5" in proposed and "GRES/gpu:a100=10" in proposed, proposed
    _sh("scontrol", "update", "PartitionName=gpu", f"TRESBillingWeights={proposed}", check=True)
    try:
        _sh("sacctmgr", "-i", "modify", "account", "where", "name=root", "cluster=lab", "set", "RawUsage=0", check=True)
        since = timezone.now().replace(microsecond=0)
        halves = _submit(sliced, f"gpu:{THREE_G}:2", wrap="sleep 15")
        assert halves.returncode == 0, halves.stderr
        job = sliced.jobs[-1]
        wait_until_finished(job)
        run = usage_ingest_slurm(cluster=sliced.slurm, now=timezone.now() + timedelta(minutes=1))
        assert run.status == SourceStatus.OK, (run.message, run.problems)
        _charged_as_sshare_prints(sliced, job, since)
    finally:
        _sh("scontrol", "update", "PartitionName=gpu", f"TRESBillingWeights={before}", check=True)


def _charged_as_sshare_prints(sliced, job, since):

    from accounting.models import Allocation, WorkloadRecord
    from accounting.services.fairshare import slurm_fairshare
    from tests.accounting.test_slurm_usage import _sshare

    record = WorkloadRecord.objects.get(cluster=sliced.slurm, job_id=job)
    assert (record.flavor_name, record.devices, record.equivalents) == (THREE_G, 2, 1.0)
    assert record.flavor is not None and record.flavor.name == "h100-mig"
    assert record.resources == {THREE_G: 2}
    assert list(Allocation.objects.filter(record=record).values_list("devices", "equivalents")) == [(2, 1.0)]
    # billed as slurmctld bills it: 1 CPU + DefMemPerCPU's 1000M × 0.25/GB + 2 slices × (1/2 × 10)
    assert record.billing == pytest.approx(1 + 1000 * 0.25 / 1024 + 10, abs=1e-6)
    report = slurm_fairshare(cluster=sliced.slurm, since=since)
    ours = {(line.account, line.user): line.usage for line in report.lines}
    deadline = time.monotonic() + 120
    while True:  # slurmctld charges RawUsage when the job's record reaches it
        raw = {key: float(f["RawUsage"] or 0) for key, _, f in _sshare()}
        if raw.get(("vision", "bob"), 0) > 0:
            break
        assert time.monotonic() < deadline, f"sshare has not charged the job: {raw}"
        time.sleep(2)
    assert ours[("vision", "bob")] == pytest.approx(raw[("vision", "bob")], rel=0.02)
