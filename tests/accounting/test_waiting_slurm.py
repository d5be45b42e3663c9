"""Why a Slurm job waits, on the real Slurm stack (issue #44.6): squeue's reason read in Allot's terms with the
jobs named, the way out (another QOS) applied and running; the API and ``allot-why`` as a user runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from accounting.services.slurm_waiting import explain_slurm_job
from quotas.services.sync import cluster_sync
from tests.accounting.test_slurm_usage import sbatch
from tests.quotas import test_slurm_sync
from tests.quotas.test_slurm_sync import _sh, _wait

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]
lab = test_slurm_sync.lab


def _reason(job: str, reason: str, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _sh("squeue", "-h", "-j", job, "-o", "%r").stdout.strip() == reason:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.django_db(transaction=True)
def test_a_job_over_its_guarantee_qos_is_explained_and_the_other_qos_runs_it(lab, live_server, settings):
    """nlp guarantees 2 GPUs of its own (4, less llm's 2): alice holds them; her next guaranteed job pends with
    QOSGrpGRES. Allot names her running job and offers nlp's burst QOS, which has room; submitted there, it runs."""
    settings.ALLOT_SLURM_QUEUE_SECONDS = 0  # every question reads squeue again (the test moves fast)
    cluster_sync(actor=lab.admin, reason="accounts first", cluster=lab.slurm)
    for user in ("alice", "bob", "dave"):
        _sh("scancel", "-u", user)
    try:
        holding = sbatch("alice", "nlp", 2, "sleep 120")
        assert _wait(holding, {"RUNNING"})
        waiting = sbatch("alice", "nlp", 1, "sleep 1")
        assert _reason(waiting, "QOSGrpGRES"), _sh("squeue", "-h", "-o", "%i|%q|%T|%r").stdout
        answer = explain_slurm_job(lab.slurm, waiting)
        assert answer is not None and answer.unit_path == lab.nlp.path
        found = answer.explanation
        top = found.top
        assert top is not None and top.code == "guarantee-qos", found.causes
        assert f"job {holding} (wrap) (2 GPUs, alice)" in top.title and "guar-nlp" in top.title
        assert found.scheduler_says == "PENDING (QOSGrpGRES)" and answer.age_s is not None
        # slurmctld's own count of the QOS: its limit reached by the job it names
        assert answer.queue_says.startswith("Slurm: QOS guar-nlp 2 of 2, burst-nlp 0 of "), answer.queue_says
        other = next(w for w, problem in answer.ways_out if w.kind == "other-qos")
        assert "--qos=burst-nlp" in other.text
        _in_the_portal_and_the_units_list(lab, waiting)
        moved = sbatch("alice", "nlp", 1, "sleep 1", "--qos=burst-nlp")  # the way out, taken
        assert _wait(moved, {"RUNNING", "COMPLETING", ""}), _sh("squeue", "-h", "-o", "%i|%q|%T|%r").stdout

        # the API and allot-why, as alice (a member of nlp by her Slurm username) and as bob (vision: not hers)
        from rest_framework.authtoken.models import Token

        from quotas import services

        alice = User.objects.create_user("alice-web")
        services.membership_add(actor=lab.admin, reason="t", unit=lab.nlp, user=alice)
        settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
        env = {"PATH": "/usr/bin:/bin", "ALLOT_URL": live_server.url, "ALLOT_CLUSTER": lab.slurm.name}
        plugin = shutil.which("allot-why", path=str(Path(sys.executable).parent))  # installed beside the interpreter
        assert plugin, "the package installs allot-why"
        mine = subprocess.run([plugin, waiting], capture_output=True, text=True,
                              env={**env, "ALLOT_TOKEN": Token.objects.create(user=alice).key})  # fmt: skip
        assert mine.returncode == 0, mine.stderr
        assert f"job {waiting} (wrap) (job/{waiting}) of {lab.nlp.path}: pending" in mine.stdout
        assert "its guarantee QOS guar-nlp is full" in mine.stdout and "--qos=burst-nlp" in mine.stdout
        assert "Slurm: QOS guar-nlp 2 of 2, burst-nlp" in mine.stdout
        stranger = User.objects.create_user("bob-web")
        theirs = subprocess.run([plugin, waiting], capture_output=True, text=True,
                                env={**env, "ALLOT_TOKEN": Token.objects.create(user=stranger).key})  # fmt: skip
        assert theirs.returncode == 1 and "Allot answered 404" in theirs.stderr
    finally:
        for user in ("alice", "bob", "dave"):
            _sh("scancel", "-u", user)


def _in_the_portal_and_the_units_list(lab, job: str) -> None:
    """The waiting job on its unit's page (Waiting now) and in the unit's waiting list, with a page of its own —
    for a member of the unit, not for somebody else under the leads' rule."""
    from django.test import Client
    from django.urls import reverse

    from quotas import services

    member = User.objects.create_user("alice-portal")
    services.membership_add(actor=lab.admin, reason="t", unit=lab.nlp, user=member)
    stranger = User.objects.create_user("carol-portal")
    with override_settings(ALLOT_SHOWBACK_VISIBILITY="leads"):
        client = Client()
        client.force_login(member)
        page = client.get(reverse("quotas:unit", args=[lab.nlp.pk]))
        assert page.status_code == 200
        assert f'id="waiting-slurm-{lab.slurm.name}-{job}"' in page.content.decode()
        own = client.get(reverse("quotas:waiting-slurm", args=[lab.slurm.name, job]))
        assert own.status_code == 200 and "QOSGrpGRES" in own.content.decode()
        assert "its guarantee QOS guar-nlp is full" in own.content.decode()
        listed = client.get("/api/v1/waiting/", {"unit": lab.nlp.path}).json()["waiting"]
        assert f"job {job} (wrap)" in [w["workload"] for w in listed]
        client.force_login(stranger)
        assert client.get(reverse("quotas:waiting-slurm", args=[lab.slurm.name, job])).status_code == 404
        listed = client.get("/api/v1/waiting/", {"unit": lab.nlp.path}).json()["waiting"]
        assert f"job {job} (wrap)" not in [w["workload"] for w in listed]


def _quiet():
    """An empty node: nothing an earlier test left holds GPUs."""
    for user in ("alice", "bob", "dave"):
        _sh("scancel", "-u", user)
    deadline = time.monotonic() + 60
    while _sh("squeue", "-h", "-t", "pending,running,completing,suspended").stdout.strip():
        assert time.monotonic() < deadline, _sh("squeue", "-h").stdout
        time.sleep(0.5)


def _sacct_times(job: str, *fields: str) -> list[list[str]]:
    """Every recorded run of the job (``-D``: a requeued job's preempted run too), oldest first."""
    done = _sh("sacct", "-n", "-X", "-D", "-P", "-S", "now-30minutes", "-j", job, "-o", ",".join(fields))
    return [line.split("|") for line in done.stdout.splitlines() if line.strip()]


@pytest.mark.django_db
def test_an_owner_waiting_for_a_preempted_borrower_is_explained_and_the_reclaim_timed_by_slurms_clock(lab, settings):
    """nlp borrows 4 GPUs under burst-nlp, the node fills; ops (inside its guarantee) asks for 2. While it pends
    with Resources, Allot says it is a reclaim naming the burst job and the contract's promise; Slurm preempts
    the borrower after its grace time and starts the owner; the reclaim Allot records from sacct has the
    borrower's preemption and the owner's submit and start to the second of Slurm's own records."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from accounting.reclaims import reclaims
    from accounting.services import usage_ingest_slurm
    from quotas import services
    from quotas.models import SyncStatus
    from quotas.policy import Resource
    from quotas.services.slurm_policy import slurm_policy_publish

    settings.ALLOT_SLURM_QUEUE_SECONDS = 0
    zone = ZoneInfo(settings.ALLOT_SLURM_TIMEZONE)
    fast = services.contract_set(
        actor=lab.admin, reason="t", name="fast-reclaim", reclaim_within=60, grace_period=10, min_run_window=10
    )
    services.org_unit_update(actor=lab.admin, reason="t", unit=lab.acme, contract=fast)
    services.quota_set(
        actor=lab.admin, reason="t", unit_id=lab.nlp.pk, flavor_id=lab.slurm_flavor.pk, resource=Resource.GPU,
        guarantee=4, burst=4,
    )  # fmt: skip
    services.membership_add(actor=lab.admin, reason="t", unit=lab.ops, slurm_username="alice")
    run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), run.message
    slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    _quiet()
    began = timezone.now().replace(microsecond=0)  # sacct's times are whole seconds
    jobs = []
    try:
        borrower = sbatch("alice", "nlp", 4, "sleep 600", "-q", "burst-nlp")
        jobs += [borrower, sbatch("alice", "nlp", 2, "sleep 600"), sbatch("bob", "vision", 1, "sleep 600")]
        assert all(_wait(j, {"RUNNING"}) for j in jobs), [
            _sh("squeue", "-h", "-j", j, "-o", "%T|%r").stdout for j in jobs
        ]
        owner = sbatch("alice", "ops", 2, "sleep 600")  # inside ops's guarantee; 1 GPU free
        jobs.append(owner)
        assert _reason(owner, "Resources", 20), _sh("squeue", "-h", "-o", "%i|%q|%T|%r").stdout
        answer = explain_slurm_job(lab.slurm, owner)
        assert answer is not None and answer.unit_path == lab.ops.path
        top = answer.explanation.top
        assert top is not None and top.code == "reclaim", answer.explanation.causes
        evidence = " ".join(top.evidence)
        assert f"job {borrower} (wrap) (4 devices, 4 borrowed, {lab.nlp.path})" in evidence, evidence
        assert "contract fast-reclaim: lent devices come back within 1 min, by " in evidence
        by = next(w for w, _ in answer.ways_out if w.kind == "wait-reclaim").by
        assert by is not None and answer.job.submitted is not None
        assert abs((by - answer.job.submitted - timedelta(seconds=60)).total_seconds()) < 1
        assert _wait(owner, {"RUNNING"}, seconds=120), (_sh("squeue", "-h", "-o", "%i|%q|%T|%r").stdout,)
        _sh("scancel", borrower)  # requeued: its preempted run is on record; the rest ends it
        assert _wait(borrower, {""}, seconds=60)
        runs = _sacct_times(borrower, "State", "End")
        preempted = [datetime.fromisoformat(end).replace(tzinfo=zone) for state, end in runs if state == "PREEMPTED"]
        assert len(preempted) == 1, runs
        [[submit, start]] = _sacct_times(owner, "Submit", "Start")[-1:]

        ingest = usage_ingest_slurm(cluster=lab.slurm, now=timezone.now() + timedelta(minutes=1))
        assert ingest.status == "ok", (ingest.message, ingest.problems)
        found = [  # sacct also lists an earlier run's jobs (the last hour): this one's are submitted since it began
            r
            for r in reclaims(timezone.now() - timedelta(minutes=30), timezone.now() + timedelta(minutes=1), {})
            if r.lender_path == lab.ops.path and r.submitted >= began
        ]
        assert len(found) == 1, found
        reclaimed = found[0]
        assert reclaimed.borrower_path == lab.nlp.path and reclaimed.contract == "fast-reclaim"
        assert reclaimed.promised_s == 60
        assert reclaimed.preempted is not None and abs((reclaimed.preempted - preempted[0]).total_seconds()) < 1
        assert abs((reclaimed.submitted - datetime.fromisoformat(submit).replace(tzinfo=zone)).total_seconds()) < 1
        assert abs((reclaimed.admitted - datetime.fromisoformat(start).replace(tzinfo=zone)).total_seconds()) < 1
    finally:
        for job in jobs:
            _sh("scancel", job)


@pytest.mark.django_db
def test_a_job_behind_priority_names_the_jobs_slurm_ranks_above_it_and_runs_when_they_have_started(lab, settings):
    """The node full (8 of 8), two jobs with room in their QOS wait for it: the one Slurm ranks lower pends with
    Priority. Allot names the other with the priority squeue reports; when GPUs free up, both start."""
    from quotas import services

    settings.ALLOT_SLURM_QUEUE_SECONDS = 0
    services.membership_add(actor=lab.admin, reason="t", unit=lab.ops, slurm_username="alice")
    services.membership_add(actor=lab.admin, reason="t", unit=lab.llm, slurm_username="dave")
    cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    _quiet()
    running, pending = [], []
    try:
        running += [sbatch("alice", "nlp", 2, "sleep 600"), sbatch("bob", "vision", 1, "sleep 600")]
        running += [sbatch("alice", "ops", 2, "sleep 600"), sbatch("dave", "llm", 2, "sleep 600")]
        running.append(sbatch("alice", "nlp", 1, "sleep 600", "-q", "burst-nlp"))
        assert all(_wait(j, {"RUNNING"}) for j in running), _sh("squeue", "-h", "-o", "%i|%q|%T|%r").stdout
        pending += [
            sbatch("dave", "llm", 1, "sleep 600", "-q", "burst-llm"),
            sbatch("bob", "vision", 1, "sleep 600", "-q", "burst-vision"),
        ]
        deadline = time.monotonic() + 60
        while True:
            reasons = {j: _sh("squeue", "-h", "-j", j, "-o", "%r|%Q").stdout.strip() for j in pending}
            behind = [j for j, r in reasons.items() if r.startswith("Priority|")]
            if behind or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert behind, (reasons, _sh("squeue", "-h", "-o", "%i|%q|%T|%r|%Q").stdout)
        [low] = behind
        [high] = [j for j in pending if j != low]
        answer = explain_slurm_job(lab.slurm, low)
        assert answer is not None
        top = answer.explanation.top
        assert top is not None and top.code == "queue", answer.explanation.causes
        priority = {j: int(_sh("squeue", "-h", "-j", j, "-o", "%Q").stdout.strip()) for j in pending}
        assert top.title.endswith(f"rank above it (its priority {priority[low]})"), top.title
        assert f"job {high} (wrap) (1 GPUs, " in top.evidence[0] and f"priority {priority[high]})" in top.evidence[0]
        assert f"sprio -l -j {low}" in top.evidence[1]
        assert any(w.kind == "wait-queue" for w, _ in answer.ways_out)
        for job in running[:2]:  # 3 GPUs free: the one ranked above starts, then this one
            _sh("scancel", job)
        assert _wait(high, {"RUNNING"}, seconds=60) and _wait(low, {"RUNNING"}, seconds=60), _sh(
            "squeue", "-h", "-o", "%i|%q|%T|%r"
        ).stdout
    finally:
        for job in running + pending:
            _sh("scancel", job)


@pytest.mark.django_db
def test_an_association_limit_set_outside_allot_is_said_as_such_and_the_job_runs_when_its_account_frees(lab, settings):
    """A site's own limit on account nlp, set with sacctmgr (Allot sets none on accounts): ``GrpJobs=1``. Alice's
    first job runs, her next one pends with AssocGrpJobsLimit. Allot says it is an account limit set outside it,
    names her running job and the sacctmgr line that shows the limit; when her first job ends, it runs.

    A GPU limit on the account would not do: the job's QOS limit comes first in Slurm's hierarchy of limits
    (resource_limits.html: the point where a limit is first defined is used), and Allot's guar-/burst- QOS
    each define ``GrpTRES=gres/gpu`` — seen on this stack: ``GrpTRES=gres/gpu=2`` on nlp let a third GPU start."""
    settings.ALLOT_SLURM_QUEUE_SECONDS = 0
    cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    _quiet()
    limit = ("sacctmgr", "-i", "modify", "account", "where", "name=nlp", "cluster=lab", "set")
    assert _sh(*limit, "GrpJobs=1").returncode == 0
    jobs = []
    try:
        first = sbatch("alice", "nlp", 2, "sleep 600")
        jobs.append(first)
        assert _wait(first, {"RUNNING"})
        second = sbatch("alice", "nlp", 1, "sleep 1", "-q", "burst-nlp")
        jobs.append(second)
        assert _reason(second, "AssocGrpJobsLimit"), _sh("squeue", "-h", "-o", "%i|%q|%T|%r").stdout
        answer = explain_slurm_job(lab.slurm, second)
        assert answer is not None
        top = answer.explanation.top
        assert top is not None and top.code == "association-limit", answer.explanation.causes
        assert top.title == "a limit on account nlp or an account above it: AssocGrpJobsLimit"
        assert "sacctmgr show assoc where account=nlp format=Account,User,GrpTRES,GrpJobs" in top.evidence[0]
        shown = _sh("sacctmgr", "-n", "-P", "show", "assoc", "where", "account=nlp", "format=User,GrpJobs")
        assert "|1" in shown.stdout.splitlines(), shown.stdout  # the line it names shows the limit
        assert top.evidence[1] == f"its running jobs on account nlp: job {first} (wrap) (2 GPUs, alice)"
        assert [w.kind for w, _ in answer.ways_out][:2] == ["wait-finish", "ask"]
        _sh("scancel", first)  # the way out: its running job ends
        assert _wait(second, {"RUNNING", "COMPLETING", ""}), _sh("squeue", "-h", "-o", "%i|%q|%T|%r").stdout
    finally:
        _sh(*limit, "GrpJobs=-1")
        for job in jobs:
            _sh("scancel", job)


@pytest.mark.django_db(transaction=True)
def test_every_gpu_request_form_is_read_from_squeues_own_fields(lab, settings):
    """``--gpus`` and ``--gpus-per-task`` are not in squeue's ``%b`` (it prints N/A): read from tres-per-job and
    tres-per-task, each job asks for what job_submit.lua counted — not "0 devices"."""
    from accounting.services.slurm_waiting import explain_slurm_job

    settings.ALLOT_SLURM_QUEUE_SECONDS = 0
    cluster_sync(actor=lab.admin, reason="accounts first", cluster=lab.slurm)
    submitted = []

    def held(*form):
        deadline = time.monotonic() + 25
        while True:
            done = _sh("sbatch", "--hold", "-A", "nlp", "-t", "5", "--chdir=/tmp", "-o", "/dev/null", *form,
                       "--wrap", "sleep 1", user="alice")  # fmt: skip
            if done.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # the associations or the job_submit snapshot are still on their way
        assert done.returncode == 0, done.stderr
        submitted.append(done.stdout.split()[-1])
        return submitted[-1]

    try:
        for form, devices in ((("--gpus=a100:2",), 2), (("-n", "2", "--gpus-per-task=a100:1"), 2)):
            job = held(*form)
            answer = explain_slurm_job(lab.slurm, job)
            assert answer is not None, _sh("squeue", "-h").stdout
            assert (answer.job.devices, answer.job.gpu_type) == (devices, "a100"), (form, answer.job)
            assert answer.explanation.devices == devices
    finally:
        for job in submitted:
            _sh("scancel", job)
