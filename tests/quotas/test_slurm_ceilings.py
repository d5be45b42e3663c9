"""A unit's running GPUs never exceed its ceiling on Slurm, whatever QOS or request form a job uses,
and a job that could never start is refused at submission with the largest job the unit can run.
Real submissions and real running jobs on the local stack (job_submit.lua installed).

The fixture tree on cluster ``lab`` (8 A100; the node also has 8 H100, for which no flavor exists):
vision guarantees 1 and borrows 1 (ceiling 2: QOS guar-vision 1, burst-vision 1); nlp's own QOS
hold 2 guaranteed and 1 borrowed (its children have their own)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quotas import services
from quotas.services.slurm_policy import slurm_policy_publish
from quotas.services.sync import cluster_sync
from tests.quotas.test_slurm_sync import _sh, _state, _wait
from tests.quotas.test_slurm_sync import lab as lab

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]
SBATCH = ("sbatch", "-H", "-t", "5", "--chdir=/tmp", "-o", "/dev/null")


@pytest.fixture
def enforced(lab):
    services.tier_set(
        actor=lab.admin, reason="t", name="P2", display_name="Interactive", priority=1000, max_runtime=4 * 3600
    )
    run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert run.status in ("applied", "in_sync"), run.message
    policy = slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    assert policy["accounts"]["vision"]["qos_gpus"] == {"burst-vision": {"a100": 1}, "guar-vision": {"a100": 1}}
    assert policy["qos_without_gpus"] == ["tier-p2"]
    node = {"a100": 8, "h100": 8, "h100-mig_1g.10gb": 8, "h100-mig_3g.40gb": 8}  # the MIG types: test_slurm_slices
    assert policy["partitions"] == {"gpu": {"node_gpus": node, "exclusive": False}}
    assert policy["default_partition"] == "gpu" and "inventory_error" not in policy
    assert _sh("bash", "deploy/slurm/install-job-submit.sh").returncode == 0
    jobs: list[str] = []
    lab.jobs = jobs
    time.sleep(2)
    yield lab
    for job in jobs:
        _sh("scancel", job)
    for job in jobs:
        _wait(job, {""}, seconds=60)


def _submit(user, account, *extra, wrap="true", keep=None):
    done = _sh(*SBATCH, "-A", account, *extra, "--wrap", wrap, user=user)
    if done.returncode == 0 and keep is not None:
        keep.append(done.stdout.split()[-1])
    return done


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--gres=gpu:h100",), "account vision (acme/research/vision) has no H100 GPU quota"),
        (("--gpus-per-node=h100",), "has no H100 GPU quota"),
        (("-n", "8", "--gpus-per-task=a100"), "8 A100 GPUs is more than account vision"),
        (("--gpus=a100",), None),  # one A100, within guar-vision: accepted
    ],
)
def test_a_gpu_type_without_a_count_is_counted(enforced, extra, said):
    done = _submit("bob", "vision", *extra, keep=enforced.jobs)
    if said is None:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode != 0 and said in done.stderr, done.stderr


def test_a_job_no_single_qos_can_hold_is_refused_with_the_largest_job_the_account_can_run(enforced):
    done = _submit("alice", "nlp", "--gres=gpu:a100:3")  # within nlp's ceiling, above each of its QOS
    assert done.returncode != 0
    assert "3 A100 GPUs can never start under QOS guar-nlp, which lets a job hold 2 at once" in done.stderr
    assert "the largest job account nlp can run is 2 A100 GPUs (QOS guar-nlp)" in done.stderr
    burst = _submit("alice", "nlp", "--qos=burst-nlp", "--gres=gpu:a100:2")
    assert burst.returncode != 0 and "under QOS burst-nlp, which lets a job hold 1 at once" in burst.stderr
    assert _submit("alice", "nlp", "--gres=gpu:a100:2", keep=enforced.jobs).returncode == 0


def test_a_tier_qos_carries_no_gpus_at_submission_nor_when_slurm_itself_checks(enforced):
    done = _submit("bob", "vision", "--qos=tier-p2", "--gres=gpu:a100:1")
    assert done.returncode != 0
    assert "QOS tier-p2 carries no GPUs" in done.stderr and "burst-vision or guar-vision" in done.stderr
    assert _submit("bob", "vision", "--qos=tier-p2", keep=enforced.jobs).returncode == 0  # CPU work is fine
    # past job_submit.lua (root is not checked): Slurm's own limit on the tier QOS holds the line
    held = _submit("bob", "vision", "--gres=gpu:a100:1", keep=enforced.jobs)
    assert held.returncode == 0, held.stderr
    job = held.stdout.split()[-1]
    _sh("scontrol", "update", f"jobid={job}", "qos=tier-p2")
    _sh("scontrol", "release", job)
    time.sleep(12)  # a scheduling pass
    shown = _sh("scontrol", "show", "job", job).stdout
    assert not ("QOS=tier-p2" in shown and "JobState=RUNNING" in shown), shown


def test_a_change_after_submission_is_checked_like_a_submission(enforced):
    held = _submit("bob", "vision", "--gres=gpu:a100:1", keep=enforced.jobs)
    job = held.stdout.split()[-1]
    more = _sh("scontrol", "update", f"jobid={job}", "Gres=gpu:a100:8", user="bob")
    assert more.returncode != 0, more.stdout
    assert "gpu:a100:1" in _sh("scontrol", "show", "job", job).stdout  # unchanged
    tier = _sh("scontrol", "update", f"jobid={job}", "qos=tier-p2", user="bob")
    assert tier.returncode != 0
    fine = _sh("scontrol", "update", f"jobid={job}", "TimeLimit=4", user="bob")
    assert fine.returncode == 0, fine.stderr  # what Allot does not count is not in its way


def test_a_per_task_gpu_change_is_counted_for_every_task(enforced):
    """Issue #41: `scontrol update TresPerTask=gres:gpu:a100:1` on a `-n 4` job was counted as 1 GPU (the
    job record has no task count) and the job then held 4 A100s on a 2-GPU account."""
    held = _submit("bob", "vision", "-n", "4", keep=enforced.jobs)
    job = held.stdout.split()[-1]
    more = _sh("scontrol", "update", f"jobid={job}", "TresPerTask=gres:gpu:a100:1", user="bob")
    assert more.returncode != 0, more.stdout
    assert "gres/gpu" not in _sh("scontrol", "show", "job", job).stdout  # unchanged: no GPUs


def test_a_heterogeneous_job_is_counted_as_a_whole(enforced):
    two = _sh(*SBATCH, "-A", "vision", "--gres=gpu:a100:1", "--wrap", "true", ":", "--gres=gpu:a100:1",
              "--wrap", "true", user="bob")  # fmt: skip
    assert two.returncode != 0 and "2 A100 GPUs can never start under QOS guar-vision" in two.stderr, two.stderr
    fits = _sh(*SBATCH, "-A", "nlp", "--gres=gpu:a100:1", "--wrap", "true", ":", "--gres=gpu:a100:1",
               "--wrap", "true", user="alice")  # fmt: skip
    assert fits.returncode == 0, fits.stderr
    enforced.jobs.append(fits.stdout.split()[-1])


def test_running_jobs_never_exceed_the_ceiling_whatever_qos_they_use(enforced):
    """Real concurrent jobs on vision (ceiling 2): its guarantee and burst QOS run, a third GPU job
    waits, a tier QOS takes no GPUs; at no scheduling pass does vision run more than 2 GPUs."""
    for qos in ("guar-vision", "burst-vision", "guar-vision"):
        done = _submit("bob", "vision", f"--qos={qos}", "--gres=gpu:a100:1", wrap="sleep 120", keep=enforced.jobs)
        assert done.returncode == 0, done.stderr
    assert _submit("bob", "vision", "--qos=tier-p2", "--gres=gpu:a100:1").returncode != 0
    for job in enforced.jobs:
        _sh("scontrol", "release", job)
    assert _wait(enforced.jobs[0], {"RUNNING"}, seconds=60) and _wait(enforced.jobs[1], {"RUNNING"}, seconds=60)
    most = 0
    for _ in range(3):  # three scheduling passes (sched_interval=10)
        time.sleep(10)
        lines = _sh("squeue", "-h", "-A", "vision", "-t", "RUNNING", "-o", "%b").stdout.split()
        most = max(most, sum(int(line.rsplit(":", 1)[-1]) for line in lines if line.startswith("gres:gpu")))
    assert most == 2, most
    assert _state(enforced.jobs[2]) == "PENDING"
    reason = _sh("squeue", "-h", "-j", enforced.jobs[2], "-o", "%r").stdout.strip()
    assert reason.startswith("QOSGrp"), reason


@pytest.mark.parametrize("qos", [None, "burst-vision"])
def test_ntasks_per_gpu_asks_for_gpus_of_any_type_and_is_refused_unless_typed(enforced, qos):
    """Issue #41: `-n 8 --ntasks-per-gpu=1` sends ntasks_per_tres and no GPU field; slurmctld then allocated
    8 GPUs of no type, counted against none of the typed QOS limits (it ran 8 A100s on a 2-GPU account)."""
    extra = (f"--qos={qos}",) if qos else ()
    untyped = _submit("bob", "vision", *extra, "-n", "8", "--ntasks-per-gpu=1", keep=enforced.jobs)
    assert untyped.returncode != 0, untyped.stdout
    assert "--ntasks-per-gpu=1 with 8 tasks asks Slurm for 8 GPUs of any type" in untyped.stderr, untyped.stderr
    assert "--gpus=a100:8 --ntasks-per-gpu=1 (without -n)" in untyped.stderr  # vision's one type, named
    small = _submit("bob", "vision", *extra, "-n", "2", "--ntasks-per-gpu=2", keep=enforced.jobs)
    assert small.returncode != 0 and "asks Slurm for 1 GPUs of any type" in small.stderr, small.stderr
    # typed: the tasks follow from the GPUs, which are counted like any typed request
    too_many = _submit("bob", "vision", *extra, "--gpus=a100:4", "--ntasks-per-gpu=1", keep=enforced.jobs)
    assert too_many.returncode != 0 and "4 A100 GPUs is more than account vision" in too_many.stderr
    fits = _submit("bob", "vision", *extra, "--gpus=a100:1", "--ntasks-per-gpu=2", keep=enforced.jobs)
    assert fits.returncode == 0, fits.stderr
    # srun asks for its allocation through the same plugin
    srun = _sh("srun", "-A", "vision", *extra, "-t", "5", "-n", "2", "--ntasks-per-gpu=1", "true", user="bob")
    assert srun.returncode != 0 and "asks Slurm for 2 GPUs of any type" in srun.stderr, srun.stderr


def test_valid_forms_that_were_refused_are_accepted(enforced):
    """Issue #41, refused but valid: `--gres=gpu` without a count on a one-type account (one GPU of its
    type); a batch hetjob whose later component has no -t (it is batch work, not interactive); a hetjob
    of 2 × guarantee + 1 × burst within each QOS (each QOS's own components are what count against it)."""
    plain = _submit("bob", "vision", "--gres=gpu", keep=enforced.jobs)
    assert plain.returncode == 0, plain.stderr
    job = plain.stdout.split()[-1]
    assert "gpu:a100" in _sh("scontrol", "show", "job", job).stdout  # made its account's one type
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".sh", dir="/tmp") as script:  # readable by the job's user
        script.write("#!/bin/bash\n#SBATCH -A nlp -t 5 --gres=gpu:a100:1\n#SBATCH hetjob\n")
        script.write("#SBATCH --gres=gpu:a100:1\ntrue\n")
        script.flush()
        Path(script.name).chmod(0o644)
        het = _sh("sbatch", "-H", "--chdir=/tmp", "-o", "/dev/null", script.name, user="alice")
    assert het.returncode == 0, het.stderr
    enforced.jobs.append(het.stdout.split()[-1])
    # nlp: guar-nlp holds 2, burst-nlp 1 — two components under the one and one under the other fit each
    # (each names its QOS: sbatch gives a --qos named in one component alone to every component)
    one = ("--gres=gpu:a100:1", "--wrap", "true")
    guar, burst = ("--qos=guar-nlp", *one), ("--qos=burst-nlp", *one)
    mixed = _sh(*SBATCH, "-A", "nlp", *guar, ":", *guar, ":", *burst, user="alice")
    assert mixed.returncode == 0, mixed.stderr
    enforced.jobs.append(mixed.stdout.split()[-1])
    # …while three under guar-nlp are still more than it lets a job hold
    three = _sh(*SBATCH, "-A", "nlp", *one, ":", *one, ":", *one, user="alice")
    assert three.returncode != 0 and "3 A100 GPUs can never start under QOS guar-nlp" in three.stderr, three.stderr


def test_gpus_without_a_type_past_job_submit_still_count_against_the_units_qos(enforced):
    """Issue #41, Slurm's own backstop: GPUs allocated without a type count against no gres/gpu:<type>
    limit, so each unit QOS also limits the untyped gres/gpu to its typed total. A job of 2 untyped GPUs
    under guar-vision (1) that job_submit.lua never saw must not start (it ran before, on any type)."""
    # root submits for bob (sbatch --uid): job_submit.lua does not check root, so nothing types it
    held = _sh(*SBATCH, "--uid=bob", "-A", "vision", "--qos=guar-vision", "--gres=gpu:2", "--wrap", "true")
    assert held.returncode == 0, held.stderr
    job = held.stdout.split()[-1]
    enforced.jobs.append(job)
    _sh("scontrol", "release", job)
    time.sleep(12)  # a scheduling pass (sched_interval=10): 16 GPUs of two types are free
    shown = _sh("scontrol", "show", "job", job).stdout
    assert "JobState=PENDING" in shown and "Reason=QOSGrpGRES" in shown, shown


def test_an_exclusive_job_is_counted_with_every_gpu_of_its_node(enforced):
    """Issue #41: slurmctld gives a job with the node to itself every GPU on it, counted against its QOS, so a
    CPU-only --exclusive job (or one of 1 GPU, or in the GPU-less tier QOS) pended forever. job_submit.lua
    now counts the node's GPUs from the snapshot's inventory and refuses with why and what to do."""
    # what slurmctld does with such a job when job_submit.lua never sees it (root submits for bob): it pends
    bypass = _sh(*SBATCH, "--uid=bob", "-A", "vision", "--exclusive", "--wrap", "true")
    assert bypass.returncode == 0, bypass.stderr
    job = bypass.stdout.split()[-1]
    enforced.jobs.append(job)
    _sh("scontrol", "release", job)
    time.sleep(12)  # a scheduling pass: the node is idle, its 16 CPUs and 16 GPUs free
    shown = _sh("scontrol", "show", "job", job).stdout
    assert "JobState=PENDING" in shown and "Reason=QOS" in shown, shown
    whole = (
        "--exclusive gives a job whole nodes, and with each node every GPU on it "
        "(8 A100 + 8 H100 + 8 H100-MIG_1G.10GB + 8 H100-MIG_3G.40GB a node on partition gpu, 1 node)"
    )
    for extra in ((), ("--gres=gpu:a100:1",), ("--qos=tier-p2",), ("-p", "gpu", "-N", "1")):
        refused = _submit("bob", "vision", "--exclusive", *extra, keep=enforced.jobs)
        assert refused.returncode != 0, (extra, refused.stdout)
        assert whole in refused.stderr and "without --exclusive, ask for the CPUs and memory you need" in refused.stderr
    # GPU types in order: the node's 8 A100 are past vision's ceiling of 2 before its H100 (none) are looked at
    assert "8 A100 GPUs is more than account vision (acme/research/vision) can ever hold: 2" in refused.stderr
    # the whole node's CPUs without --exclusive: accepted (it shares the GPUs it does not ask for)
    assert _submit("bob", "vision", "-c", "16", keep=enforced.jobs).returncode == 0
