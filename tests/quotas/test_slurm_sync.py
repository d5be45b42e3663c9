"""Sync with a real slurmdbd (the local stack deploy/slurm/local-slurm.sh starts): read with
sacctmgr, plan, apply, read again; a second sync writes nothing; the site's own accounts stay."""

import subprocess
from pathlib import Path

import pytest

from quotas import services
from quotas.integrations.slurm import Sacctmgr
from quotas.models import ClusterKind, SyncObject, SyncOutcome, SyncRun, SyncStatus
from quotas.policy import Resource
from quotas.services.sync import cluster_sync, slurm_sync

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]
WRITES = {SyncOutcome.CREATED, SyncOutcome.UPDATED, SyncOutcome.DELETED}


@pytest.fixture
def lab(org):
    """The fixture tree, also on Slurm cluster 'lab' (gres/gpu:a100 × 8), with members."""
    cluster = services.cluster_set(
        actor=org.admin, reason="t", name="slurm-lab", kind=ClusterKind.SLURM, connection_ref="slurm:lab"
    )
    flavor = services.flavor_set(
        actor=org.admin,
        reason="t",
        cluster=cluster,
        name="a100",
        accelerator_model="A100",
        device_memory_gb=80,
        physical_devices=8,
    )

    def q(unit, g, b=0):
        return services.QuotaChange(unit.pk, flavor.pk, Resource.GPU, g, b, 0)

    for level in (
        [q(org.acme, 8)],
        [q(org.research, 6, 2), q(org.ops, 2)],
        [q(org.nlp, 4, 2), q(org.vision, 1, 1)],
        [q(org.llm, 2, 1)],
    ):
        services.quota_set_bulk(actor=org.admin, reason="t", changes=level)
    for unit, user in ((org.nlp, "alice"), (org.nlp, "dave"), (org.vision, "bob")):
        services.membership_add(actor=org.admin, reason="t", unit=unit, slurm_username=user)
    unix_users("alice", "bob", "dave")
    org.slurm, org.slurm_flavor = cluster, flavor
    if Path("/etc/slurm/job_submit.lua").exists():  # an earlier test (or the demo) left job_submit.lua on:
        from quotas.services.slurm_policy import slurm_policy_publish

        # it checks this tree from now on (it looks for a new one every 10 s: tests retry a refusal that long)
        slurm_policy_publish(cluster=cluster, out=Path("/etc/slurm/allot-policy"))
    return org


def unix_users(*names):
    """The members as Unix users, before any sync: slurmctld resolves a user's uid when it learns the
    association, and one created later stays unknown ("Invalid account" on every sbatch) until
    ``scontrol reconfigure`` — which runs here when a user had to be created."""
    created = False
    for name in names:
        if _sh("id", name).returncode != 0:
            _sh("useradd", "-M", "-s", "/bin/sh", name, check=True)
            created = True
    if created:
        _sh("scontrol", "reconfigure")


def writes(run):
    return list(SyncObject.objects.filter(run=run, outcome__in=WRITES))


def test_sync_converges_and_a_second_sync_writes_nothing(lab):
    first = cluster_sync(actor=lab.admin, reason="first", cluster=lab.slurm)
    assert first.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), first.message
    accounts, users, qos, _ = Sacctmgr().read("lab")
    parents = {a.name: a.parent for a in accounts}
    assert {k: parents.get(k) for k in ("acme", "research", "nlp", "llm", "vision", "ops")} == {
        "acme": "root",
        "research": "acme",
        "nlp": "research",
        "llm": "nlp",
        "vision": "research",
        "ops": "acme",
    }
    by_name = {q.name: q for q in qos}
    assert by_name["guar-nlp"].grp_tres == {"gres/gpu:a100": 2, "gres/gpu": 2}  # nlp 4 − llm 2; untyped backstop
    # strict subtree ceilings: nlp's burst of 2 is shared with its project llm (which asks 1)
    assert by_name["burst-nlp"].grp_tres == {"gres/gpu:a100": 1, "gres/gpu": 1}
    assert by_name["burst-nlp"].preempt_mode == "requeue"
    assert by_name["burst-llm"].grp_tres == {"gres/gpu:a100": 1, "gres/gpu": 1}
    assert by_name["burst-nlp"].grace_time_s == 120 and by_name["burst-nlp"].preempt_exempt_s == 300
    assert "burst-nlp" in by_name["guar-vision"].preempt
    assert {("alice", "nlp"), ("dave", "nlp"), ("bob", "vision")} <= {(u.name, u.account) for u in users}
    second = cluster_sync(actor=lab.admin, reason="second", cluster=lab.slurm)
    assert second.status == SyncStatus.IN_SYNC and writes(second) == []
    assert second.counts["sacctmgr_calls"] == 10  # two reads of five calls, not one write


def test_a_quota_change_becomes_exactly_the_qos_modifications(lab):
    cluster_sync(actor=lab.admin, reason="baseline", cluster=lab.slurm)
    services.quota_set(
        actor=lab.admin,
        reason="t",
        unit_id=lab.llm.pk,
        flavor_id=lab.slurm_flavor.pk,
        resource=Resource.GPU,
        guarantee=3,
    )
    preview = cluster_sync(actor=lab.admin, reason="what would change", cluster=lab.slurm, mode="dry_run")
    planned = sorted(o.name for o in SyncObject.objects.filter(run=preview))
    assert preview.status == SyncStatus.WOULD_CHANGE and planned == ["guar-llm", "guar-nlp"]
    run = cluster_sync(actor=lab.admin, reason="apply", cluster=lab.slurm)
    assert sorted((o.kind, o.name, o.outcome) for o in writes(run)) == [
        ("qos", "guar-llm", "updated"),
        ("qos", "guar-nlp", "updated"),
    ]
    assert all("rc=0" in o.message for o in writes(run))
    _, _, qos, _ = Sacctmgr().read("lab")
    assert {q.name: q.grp_tres for q in qos}["guar-nlp"] == {"gres/gpu:a100": 1, "gres/gpu": 1}
    cluster_sync(actor=lab.admin, reason="restore", cluster=lab.slurm)


def test_an_account_that_is_not_ours_is_left_alone(lab):
    name = "site-tools"
    subprocess.run(
        ["sacctmgr", "-i", "add", "account", name, "cluster=lab", "Description=site tools of the platform team"],
        capture_output=True,
        check=False,
    )
    try:
        unit = services.org_unit_create(actor=lab.admin, reason="t", parent=lab.ops, kind="team", slug=name)
        services.quota_set(
            actor=lab.admin,
            reason="t",
            unit_id=unit.pk,
            flavor_id=lab.slurm_flavor.pk,
            resource=Resource.GPU,
            guarantee=1,
        )
        run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
        [refusal] = SyncObject.objects.filter(run=run, outcome=SyncOutcome.NOT_OURS)
        assert refusal.name == name and "not created by Allot" in refusal.message
        description = subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "account", name, "format=Descr"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert description == "site tools of the platform team"
    finally:
        subprocess.run(
            ["sacctmgr", "-i", "delete", "account", "where", f"name={name}"], capture_output=True, check=False
        )


def test_a_missing_sacctmgr_is_a_clear_failure(lab):
    run = slurm_sync(actor=lab.admin, reason="t", cluster=lab.slurm, runner=Sacctmgr(binary="/nonexistent/sacctmgr"))
    assert run.status == SyncStatus.FAILED and "is not installed" in run.message


def _sh(*argv, user=None, check=False):
    command = ["runuser", "-u", user, "--", *argv] if user else list(argv)
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=check)


def node_to_ourselves(seconds=300):
    """Wait until no job is pending, running, completing or suspended on the local Slurm stack: the
    tests that count the node's GPUs need all of them. slurmctld is shared by whatever else runs on the
    machine (another suite's jobs hold GPUs for up to 10 minutes), so this fails, naming what holds the
    node, rather than let a test count someone else's job as its own."""
    import time

    listing = ["squeue", "-h", "-t", "pending,running,completing,suspended,configuring", "-o", "%i %a %u %T %b"]
    for _ in range(seconds * 2):
        held = _sh(*listing).stdout.strip()
        if not held:
            return
        time.sleep(0.5)
    pytest.fail(f"the Slurm node is still in use after {seconds} s by jobs this test did not submit:\n{held}")


def test_submissions_are_checked_by_job_submit_lua_against_the_published_snapshot(lab, tmp_path):
    import time
    from pathlib import Path

    from quotas.services.slurm_policy import slurm_policy_publish

    services.tier_set(
        actor=lab.admin, reason="t", name="P2", display_name="Interactive", priority=1000, max_runtime=4 * 3600
    )
    cluster_sync(actor=lab.admin, reason="accounts first", cluster=lab.slurm)
    policy = slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    assert policy["accounts"]["nlp"]["gpus"] == {"a100": 6} and policy["interactive_max_minutes"] == 240
    installed = _sh("bash", "deploy/slurm/install-job-submit.sh")
    assert installed.returncode == 0, installed.stderr
    time.sleep(2)
    ok = _sh(
        "sbatch",
        "-A",
        "nlp",
        "--gres=gpu:a100:1",
        "-t",
        "1",
        "--chdir=/tmp",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
        user="alice",
    )
    assert ok.returncode == 0 and "Submitted batch job" in ok.stdout, ok.stderr
    too_big = _sh("sbatch", "-A", "nlp", "--gres=gpu:a100:7", "-t", "1", "--wrap", "true", user="alice")
    assert too_big.returncode != 0
    assert "Allot: 7 A100 GPUs is more than account nlp (acme/research/nlp) can ever hold: 6" in too_big.stderr
    wrong_qos = _sh("sbatch", "-A", "nlp", "-q", "guar-vision", "-t", "1", "--wrap", "true", user="alice")
    assert wrong_qos.returncode != 0 and "account nlp may not use QOS guar-vision" in wrong_qos.stderr
    long_session = _sh("salloc", "--no-shell", "-A", "nlp", "-t", "300", user="alice")
    assert long_session.returncode != 0 and "interactive jobs need a time limit of at most 240" in long_session.stderr
    job = ok.stdout.split()[-1]
    for _ in range(60):  # the compliant job really runs
        state = _sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "State").stdout.strip()
        if state in ("COMPLETED", "FAILED"):
            break
        time.sleep(1)
    assert state == "COMPLETED"


def test_the_first_sync_is_few_calls_and_records_each_call_on_its_objects(lab):
    for account in ("llm", "nlp", "vision", "research", "ops", "acme"):  # start from nothing of ours
        _sh("sacctmgr", "-i", "delete", "user", "where", f"account={account}", "cluster=lab")
        _sh("sacctmgr", "-i", "delete", "account", "where", f"name={account}", "cluster=lab")
    run = cluster_sync(actor=lab.admin, reason="first", cluster=lab.slurm)
    assert run.status == SyncStatus.APPLIED, run.message
    created = SyncObject.objects.filter(run=run, outcome=SyncOutcome.CREATED)
    loaded = [o for o in created if o.kind in ("account", "user")]
    assert len(loaded) == 9 and all("sacctmgr -i load" in o.message and "rc=0" in o.message for o in loaded)
    assert sum("file" in o.details for o in loaded) == 1  # the partial dump is kept once, on the first object
    # 5 reads, the TRES read when QOS are written, the planned calls (one load for 6 accounts and 3
    # users, QOS calls), 5 reads to prove convergence
    tres_read = any(o.kind == "qos" and o.outcome != SyncOutcome.DELETED for o in writes(run))
    assert run.counts["sacctmgr_calls"] == 10 + tres_read + run.counts["planned_calls"]
    assert run.counts["planned_calls"] < len(created)


def test_drift_is_reported_field_by_field_and_corrected_when_the_policy_says_so(lab):
    from quotas.models import DriftPolicy
    from quotas.tasks import drift_check

    cluster_sync(actor=lab.admin, reason="baseline", cluster=lab.slurm)
    _sh("sacctmgr", "-i", "modify", "qos", "where", "name=guar-nlp", "set", "GrpTRES=gres/gpu:a100=5", "Priority=7")
    _sh("sacctmgr", "-i", "modify", "account", "where", "name=vision", "cluster=lab", "set", "Fairshare=3")
    run = cluster_sync(actor=lab.admin, reason="check", cluster=lab.slurm, mode="drift_check")
    assert run.status == SyncStatus.DRIFT and writes(run) == []
    drift = {o.name: o.changes for o in SyncObject.objects.filter(run=run, outcome=SyncOutcome.DRIFT)}
    assert drift == {
        "guar-nlp": [
            {"path": "priority", "desired": 1000, "actual": 7},
            {
                "path": "grptres",
                "desired": {"gres/gpu:a100": 2, "gres/gpu": 2},
                "actual": {"gres/gpu:a100": 5, "gres/gpu": 2},
            },
        ],
        "vision": [{"path": "fairshare", "desired": 1, "actual": 3}],
    }
    _, _, qos, _ = Sacctmgr().read("lab")
    assert {q.name: q.grp_tres for q in qos}["guar-nlp"] == {"gres/gpu:a100": 5, "gres/gpu": 2}  # reported only
    services.cluster_set(actor=lab.admin, reason="t", name=lab.slurm.name, drift_policy=DriftPolicy.CORRECT)
    from config.celery import app

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        assert lab.slurm.pk in drift_check.apply(args=("slurm",)).get()  # what beat runs
    finally:
        app.conf.task_always_eager = eager
    corrected = SyncRun.objects.filter(cluster=lab.slurm).latest("pk")
    assert corrected.mode == "drift_check" and corrected.status == SyncStatus.APPLIED
    assert sorted(o.name for o in writes(corrected)) == ["guar-nlp", "vision"]
    _, _, qos, _ = Sacctmgr().read("lab")
    assert {q.name: (q.grp_tres, q.priority) for q in qos}["guar-nlp"] == ({"gres/gpu:a100": 2, "gres/gpu": 2}, 1000)


def test_a_delete_refused_while_jobs_run_is_blocked_then_done_by_a_later_sync(lab):
    import time
    from pathlib import Path

    from quotas.services.slurm_policy import slurm_policy_publish

    scratch = services.org_unit_create(actor=lab.admin, reason="t", parent=lab.nlp, kind="project", slug="scratch")
    services.quota_set(
        actor=lab.admin,
        reason="t",
        unit_id=scratch.pk,
        flavor_id=lab.slurm_flavor.pk,
        resource=Resource.GPU,
        guarantee=1,
    )
    services.membership_add(actor=lab.admin, reason="t", unit=scratch, slurm_username="alice")
    idle = services.org_unit_create(actor=lab.admin, reason="t", parent=lab.nlp, kind="project", slug="scratch2")
    services.quota_set(
        actor=lab.admin, reason="t", unit_id=idle.pk, flavor_id=lab.slurm_flavor.pk, resource=Resource.GPU, guarantee=1
    )
    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm).status == SyncStatus.APPLIED
    slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    time.sleep(2)  # job_submit.lua re-reads the snapshot at most every second
    submitted = _sh(
        "sbatch", "-A", "scratch", "--gres=gpu:a100:1", "-t", "5", "--chdir=/tmp", "-o", "/dev/null",
        "--wrap", "sleep 300", user="alice",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.split()[-1]
    try:
        for _ in range(60):
            if _sh("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING":
                break
            time.sleep(1)
        services.org_unit_archive(actor=lab.admin, reason="project over", unit=scratch)
        services.org_unit_archive(actor=lab.admin, reason="project over", unit=idle)
        run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
        # both accounts were deleted in one call, which Slurm refused as a whole: retried one by one
        gone = SyncObject.objects.get(run=run, name="scratch2")
        assert gone.outcome == SyncOutcome.DELETED and gone.details["objects_in_call"] == 1
        blocked = SyncObject.objects.filter(run=run, outcome=SyncOutcome.BLOCKED)
        assert {o.name for o in blocked} == {"alice@scratch", "scratch", "guar-scratch"}, [
            (o.name, o.outcome, o.message) for o in SyncObject.objects.filter(run=run)
        ]
        assert all("rc=1" in o.message and "active" in o.message.lower() for o in blocked if o.kind != "qos")
        assert blocked.get(name="guar-scratch").message.startswith("waits for the account(s) blocked by running jobs")
        assert run.status == SyncStatus.PARTIAL and "blocked by running jobs" in run.message
        accounts, _, _, _ = Sacctmgr().read("lab")
        assert "scratch" in {a.name for a in accounts}  # never forced
    finally:
        _sh("scancel", job)
        for _ in range(60):
            if not _sh("squeue", "-h", "-j", job).stdout.strip():
                break
            time.sleep(1)
    later = cluster_sync(actor=lab.admin, reason="retry", cluster=lab.slurm)
    assert later.status == SyncStatus.APPLIED, later.message
    assert sorted((o.name, o.outcome) for o in writes(later)) == [
        ("alice@scratch", "deleted"),
        ("guar-scratch", "deleted"),
        ("scratch", "deleted"),
    ]  # guar-scratch2 went with scratch2 in the first run


def test_limits_on_a_tres_the_cluster_lacks_are_held_back_with_the_fix_and_the_rest_is_applied(lab):
    """A flavor whose GPU type is not a TRES of the cluster (b200 on a100 nodes): sacctmgr would refuse
    the QOS that name it (pitfall: the TRES must exist first), so the sync holds them back, and the
    accounts and users that need them, each with what to do; everything else is written."""
    b200 = services.flavor_set(
        actor=lab.admin,
        reason="t",
        cluster=lab.slurm,
        name="b200",
        accelerator_model="B200",
        device_memory_gb=80,
        physical_devices=16,
    )
    alpha, beta = (
        services.org_unit_create(actor=lab.admin, reason="t", parent=lab.ops, kind="team", slug=slug)
        for slug in ("alpha", "beta")
    )
    for unit, g in ((lab.acme, 4), (lab.ops, 4), (alpha, 2), (beta, 2)):
        services.quota_set(
            actor=lab.admin, reason="t", unit_id=unit.pk, flavor_id=b200.pk, resource=Resource.GPU, guarantee=g
        )
    services.membership_add(actor=lab.admin, reason="t", unit=alpha, slurm_username="bob")
    services.membership_add(actor=lab.admin, reason="t", unit=lab.vision, slurm_username="erin")
    _sh("sacctmgr", "-i", "delete", "user", "where", "name=erin", "account=vision", "cluster=lab")  # a new member
    run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    outcomes = {o.name: o for o in SyncObject.objects.filter(run=run)}
    invalid = {n: o.message for n, o in outcomes.items() if o.outcome == SyncOutcome.INVALID}
    assert set(invalid) == {"guar-alpha", "guar-beta", "alpha", "beta", "bob@alpha", "bob"}, invalid
    assert invalid["guar-alpha"].startswith(
        "gres/gpu:b200 is not a TRES of cluster lab: add it to AccountingStorageTRES"
    )
    assert "waits for its QOS" in invalid["alpha"] and invalid["bob@alpha"] == "waits for account alpha"
    assert outcomes["erin@vision"].outcome == SyncOutcome.CREATED
    errors = [(o.kind, o.name, o.message) for o in outcomes.values() if o.outcome == SyncOutcome.ERROR]
    assert errors == []  # nothing was sent to fail
    assert invalid["bob"] == "keeps its default account: alpha waits for its QOS"
    assert run.status == SyncStatus.PARTIAL and "6 object(s) left out" in run.message
    _, users, _, _ = Sacctmgr().read("lab")
    assert ("erin", "vision") in {(u.name, u.account) for u in users}


def _fresh_tree(lab):
    """Archive the fixture tree in Allot (Slurm keeps it): as if Allot's database were new."""
    services.org_unit_archive(actor=lab.admin, reason="start again", unit=lab.acme)


def test_import_from_the_live_cluster_then_sync_is_a_no_op(lab):
    from django.core.management import call_command

    from quotas.models import OrgUnit

    services.tier_set(
        actor=lab.admin, reason="t", name="P2", display_name="Interactive", priority=1000, max_runtime=4 * 3600
    )
    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm).status in (
        SyncStatus.APPLIED,
        SyncStatus.IN_SYNC,
    )
    _fresh_tree(lab)
    call_command("allot_import_slurm", "--cluster", lab.slurm.name)
    nlp = OrgUnit.objects.get(path="acme/research/nlp", archived_at=None)
    assert nlp.kind == "team" and nlp.memberships.count() == 2
    check = cluster_sync(actor=lab.admin, reason="after import", cluster=lab.slurm, mode="dry_run")
    assert check.status == SyncStatus.IN_SYNC, "\n".join(
        f"{o.name}: {o.message}" for o in SyncObject.objects.filter(run=check)
    )
    assert check.counts["planned_calls"] == 0


def test_import_from_a_dump_file_then_sync_is_a_no_op(lab, tmp_path):
    from django.core.management import call_command

    from quotas.integrations.slurm import QOS_FORMAT
    from quotas.models import OrgUnit

    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm).status in (
        SyncStatus.APPLIED,
        SyncStatus.IN_SYNC,
    )
    dump, qos = tmp_path / "lab.cfg", tmp_path / "qos.psv"
    _sh("sacctmgr", "-i", "dump", "lab", f"file={dump}", check=True)
    qos.write_text(_sh("sacctmgr", "-P", "show", "qos", f"format={','.join(QOS_FORMAT)}", check=True).stdout)
    _fresh_tree(lab)
    call_command("allot_import_slurm", "--cluster", lab.slurm.name, "--from-dump", str(dump), "--qos-file", str(qos))
    assert OrgUnit.objects.filter(path="acme/research/nlp/llm", archived_at=None).exists()
    check = cluster_sync(actor=lab.admin, reason="after import", cluster=lab.slurm, mode="dry_run")
    assert check.status == SyncStatus.IN_SYNC, "\n".join(
        f"{o.name}: {o.message}" for o in SyncObject.objects.filter(run=check)
    )


def test_import_refuses_an_organisation_that_exists(lab):
    from django.core.management import CommandError, call_command

    cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    with pytest.raises(CommandError, match="an organisation 'acme' exists already"):
        call_command("allot_import_slurm", "--cluster", lab.slurm.name)


def _submit_start(job):
    """The job's submit and start times from slurmdbd: its latest record (a job id the local stack hands
    out again after a restart also names older jobs), once slurmdbd has the start (it lags squeue)."""
    import time
    from datetime import datetime

    for _ in range(60):
        lines = _sh("sacct", "-n", "-X", "-P", "-S", "now-30minutes", "-j", job, "-o", "Submit,Start").stdout.split()
        if lines and "Unknown" not in lines[-1]:
            submit, start = (datetime.fromisoformat(t) for t in lines[-1].split("|"))
            return submit, start
        time.sleep(0.5)
    raise AssertionError(f"slurmdbd has no start for job {job}: {lines}")


def _state(job):
    return _sh("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()


def _wait(job, states, seconds=120):
    import time

    for _ in range(seconds * 2):
        if _state(job) in states:
            return True
        time.sleep(0.5)
    return False


def test_reclamation_a_burst_job_is_requeued_when_the_owner_needs_its_guarantee(lab):
    """For real on slurmctld: nlp borrows 4 GPUs (burst QOS), the node fills up, then ops submits a
    job inside its guarantee. Slurm preempts the burst job under the contract Allot compiled
    (minimum run window 10 s → PreemptExemptTime, grace 10 s → GraceTime) and requeues it; ops's
    job starts. The measured reclaim time (submit → start of the owner's job) is compared with the
    contract's reclaim_within and written to artifacts/reclamation.json."""
    import json
    import time
    from pathlib import Path

    from quotas.services.slurm_policy import slurm_policy_publish

    out = Path(__file__).resolve().parents[2] / "artifacts"
    (out / "reclamation.json").unlink(missing_ok=True)  # a failed run leaves no earlier figures behind
    assert cluster_sync(actor=lab.admin, reason="the fixture's tree first", cluster=lab.slurm).status in (
        SyncStatus.APPLIED,
        SyncStatus.IN_SYNC,
    )  # whatever an earlier run left (its burst, its members) is undone, so the edits below are applied
    fast = services.contract_set(
        actor=lab.admin, reason="t", name="fast-reclaim", reclaim_within=60, grace_period=10, min_run_window=10
    )
    # on the whole organisation: a promise must hold for the worst-case borrower, and with vision and
    # nlp borrowing under the standard contract (5 min window + 2 min grace) a 1-minute promise is
    # refused at edit time (issue #24.5)
    from quotas.policy.violations import PolicyViolationError

    with pytest.raises(PolicyViolationError, match="borrower acme/research/vision may keep them 8m10s"):
        services.org_unit_update(actor=lab.admin, reason="t", unit=lab.nlp, contract=fast)
    services.org_unit_update(actor=lab.admin, reason="t", unit=lab.acme, contract=fast)
    services.quota_set(
        actor=lab.admin,
        reason="t",
        unit_id=lab.nlp.pk,
        flavor_id=lab.slurm_flavor.pk,
        resource=Resource.GPU,
        guarantee=4,
        burst=4,
    )
    services.membership_add(actor=lab.admin, reason="t", unit=lab.ops, slurm_username="alice")
    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm).status == SyncStatus.APPLIED
    _, _, qos, _ = Sacctmgr().read("lab")
    burst = {q.name: q for q in qos}["burst-nlp"]
    assert (burst.grace_time_s, burst.preempt_exempt_s, burst.preempt_mode) == (10, 10, "requeue")
    slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    time.sleep(2)  # job_submit.lua re-reads the snapshot

    def sbatch(user, account, gpus, *extra):
        done = _sh(
            "sbatch", "-A", account, f"--gres=gpu:a100:{gpus}", "-t", "10", "--chdir=/tmp", "-o", "/dev/null",
            *extra, "--wrap", "sleep 600", user=user,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[-1]

    for user in ("alice", "bob"):  # an empty node: nothing left from an earlier test holds GPUs
        _sh("scancel", "-u", user)
    node_to_ourselves()
    jobs = []
    try:
        borrower = sbatch("alice", "nlp", 4, "-q", "burst-nlp")
        jobs.append(borrower)
        jobs += [sbatch("alice", "nlp", 2), sbatch("bob", "vision", 1)]  # 7 of 8 GPUs in use
        assert all(_wait(job, {"RUNNING"}) for job in jobs), [(j, _state(j)) for j in jobs]
        owner = sbatch("alice", "ops", 2)  # inside ops's guarantee; only 1 GPU is free
        jobs.append(owner)
        assert _wait(owner, {"RUNNING"}, seconds=180), (_state(owner), _state(borrower))
        submit, start = _submit_start(owner)
        reclaim_s = (start - submit).total_seconds()
        shown = _sh("scontrol", "show", "job", borrower).stdout
        assert "Restarts=1" in shown and _state(borrower) in ("PENDING", "REQUEUED", "REQUEUE_HOLD"), shown
        events = _sh("sacct", "-n", "-P", "-D", "-j", borrower, "-o", "State").stdout.split()
        assert "REQUEUED" in events or "PREEMPTED" in events, events
        # the contract protected the borrower: it was not stopped before its grace period ran out; and
        # the owner's promise held against the worst-case borrower (window + grace + a scheduling pass)
        assert reclaim_s >= fast.grace_period
        worst = fast.min_run_window + fast.grace_period + 10  # sched_interval=10 on the local stack
        assert reclaim_s <= fast.reclaim_within, (reclaim_s, worst)
        figures = {
            "reclaim_s": reclaim_s,
            "reclaim_within_s": fast.reclaim_within,
            "min_run_window_s": fast.min_run_window,
            "grace_period_s": fast.grace_period,
            "within_contract": reclaim_s <= fast.reclaim_within,
            "worst_case_borrower_s": worst,
        }
        out.mkdir(exist_ok=True)
        (out / "reclamation.json").write_text(json.dumps(figures, indent=1) + "\n")
        print(f"reclamation: {figures}")
    finally:
        for job in jobs:
            _sh("scancel", job)
        for job in jobs:
            _wait(job, {""}, seconds=60)


def test_a_name_slurm_would_change_is_refused_at_input_and_reported_by_the_sync(lab):
    from quotas.errors import InputError
    from quotas.models import Membership

    with pytest.raises(InputError) as refused:
        services.membership_add(actor=lab.admin, reason="t", unit=lab.vision, slurm_username="Erin Smith")
    assert "Slurm" in refused.value.errors["slurm_username"][0]
    # a name that got in before that check (an old release, a restore): reported, the rest synced
    member = services.membership_add(actor=lab.admin, reason="t", unit=lab.vision, slurm_username="erin")
    Membership.objects.filter(pk=member.pk).update(slurm_username="Erin")
    run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    [invalid] = SyncObject.objects.filter(run=run, outcome=SyncOutcome.INVALID)
    assert invalid.name == "Erin@vision" and "e.g. 'erin'" in invalid.message
    assert run.status == SyncStatus.PARTIAL and "left out" in run.message
    _, users, _, _ = Sacctmgr().read("lab")
    assert ("bob", "vision") in {(u.name, u.account) for u in users}
    assert "erin" not in {u.name for u in users}  # not lowercased behind the member's back


def test_a_sync_through_the_api_records_the_slurm_run(lab, django_capture_on_commit_callbacks, monkeypatch):
    from rest_framework.test import APIClient

    from config.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    client = APIClient()
    client.force_authenticate(lab.admin)
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            f"/api/v1/clusters/{lab.slurm.name}/sync/", {"mode": "dry_run", "reason": "look"}, format="json"
        )
    assert answer.status_code == 202, answer.content
    run = client.get("/api/v1/sync-runs/", {"cluster": lab.slurm.name}).json()["results"][0]
    assert run["mode"] == "dry_run" and run["status"] in ("would_change", "in_sync")
    from quotas.errors import InputError

    off = services.cluster_set(actor=lab.admin, reason="t", name=lab.slurm.name, enabled=False)
    with pytest.raises(InputError, match="switched off"):
        cluster_sync(actor=lab.admin, reason="t", cluster=off)


def test_a_slurmdbd_that_does_not_answer_is_a_clear_failure_and_nothing_changes(lab, tmp_path):
    from pathlib import Path

    conf = tmp_path / "slurm.conf"  # the real configuration, pointing at a port where no slurmdbd listens
    lines = Path("/etc/slurm/slurm.conf").read_text().splitlines()
    conf.write_text(
        "\n".join(x for x in lines if not x.startswith("AccountingStoragePort")) + "\nAccountingStoragePort=6999\n"
    )
    run = slurm_sync(actor=lab.admin, reason="t", cluster=lab.slurm, runner=Sacctmgr(env={"SLURM_CONF": str(conf)}))
    assert run.status == SyncStatus.FAILED and run.message.startswith("slurmdbd did not answer")
    assert "Connection refused" in run.message and writes(run) == []


def test_a_members_default_account_follows_the_tree(lab):
    services.membership_add(actor=lab.admin, reason="t", unit=lab.llm, slurm_username="alice")
    cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert _default("alice") == "llm"  # Allot's choice: the first of her accounts by name
    services.org_unit_archive(actor=lab.admin, reason="project over", unit=lab.llm)
    run = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert run.status == SyncStatus.APPLIED, run.message
    changed = SyncObject.objects.get(run=run, kind="user", name="alice")
    assert changed.changes == [{"path": "defaultaccount", "desired": "nlp", "actual": "llm"}]
    assert _default("alice") == "nlp"


def _default(user):
    return _sh("sacctmgr", "-n", "-P", "show", "user", user, "format=DefaultAccount", check=True).stdout.strip()


def test_limits_allot_never_sets_are_drift_and_a_sites_qos_is_never_allots_by_its_name(lab):
    """Out-of-band limits on Allot's account and QOS are reported, then removed under `correct`; a site
    QOS named like Allot's (guar-rogue) survives every sync."""
    from quotas.models import DriftPolicy

    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm).status in (
        SyncStatus.APPLIED,
        SyncStatus.IN_SYNC,
    )
    _sh("sacctmgr", "-i", "add", "qos", "guar-rogue", "Description=reserved for the vendor", check=True)
    try:
        _sh("sacctmgr", "-i", "modify", "account", "nlp", "set", "GrpTRES=gres/gpu:a100=1", "MaxJobs=1", check=True)
        _sh(
            "sacctmgr", "-i", "modify", "qos", "guar-vision", "set", "MaxTRESPerUser=gres/gpu:a100=1",
            "Flags=DenyOnLimit", check=True,
        )  # fmt: skip
        report = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm, mode="drift_check")
        drifted = {o.name: o for o in SyncObject.objects.filter(run=report, outcome=SyncOutcome.DRIFT)}
        assert report.status == SyncStatus.DRIFT and set(drifted) == {"nlp", "guar-vision"}, report.message
        assert {c["path"] for c in drifted["nlp"].changes} == {"limits"}
        assert drifted["nlp"].changes[0]["actual"] == {"grptres": "gres/gpu:a100=1", "maxjobs": "1"}
        assert {c["path"] for c in drifted["guar-vision"].changes} == {"flags", "limits"}
        services.cluster_set(
            actor=lab.admin, reason="t", name=lab.slurm.name, kind=ClusterKind.SLURM,
            connection_ref=lab.slurm.connection_ref, drift_policy=DriftPolicy.CORRECT,
        )  # fmt: skip
        lab.slurm.refresh_from_db()
        corrected = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm, mode="drift_check")
        assert corrected.status == SyncStatus.APPLIED, corrected.message
        accounts, _, qos, _ = Sacctmgr().read("lab")
        assert {a.name: a for a in accounts}["nlp"].limits == {}
        vision = {q.name: q for q in qos}["guar-vision"]
        assert (vision.flags, vision.limits) == ((), {})
        assert "guar-rogue" in {q.name for q in qos}  # the site's, for all its name
        again = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm, mode="drift_check")
        assert again.status == SyncStatus.IN_SYNC, again.message
    finally:
        _sh("sacctmgr", "-i", "delete", "qos", "where", "name=guar-rogue")


def _synced(lab):
    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm).status in (
        SyncStatus.APPLIED,
        SyncStatus.IN_SYNC,
    )


def _alices_drift(lab, *settings):
    """Set ``settings`` on alice's association in nlp by hand, and check only it drifted; returns its
    changes by field."""
    _sh("sacctmgr", "-i", "modify", "user", "where", "name=alice", "account=nlp", "cluster=lab", "set", *settings,
        check=True)  # fmt: skip
    report = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm, mode="drift_check")
    drifted = {o.name: o for o in SyncObject.objects.filter(run=report, outcome=SyncOutcome.DRIFT)}
    assert report.status == SyncStatus.DRIFT and set(drifted) == {"alice@nlp"}, report.message
    return {c["path"]: c for c in drifted["alice@nlp"].changes}


def _alice_corrected(lab):
    """Under the `correct` drift policy a drift check resets what drifted; alice's association as read after."""
    from quotas.models import DriftPolicy

    services.cluster_set(
        actor=lab.admin, reason="t", name=lab.slurm.name, kind=ClusterKind.SLURM,
        connection_ref=lab.slurm.connection_ref, drift_policy=DriftPolicy.CORRECT,
    )  # fmt: skip
    lab.slurm.refresh_from_db()
    corrected = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm, mode="drift_check")
    assert corrected.status == SyncStatus.APPLIED, corrected.message
    _, users, _, _ = Sacctmgr().read("lab")
    return next(u for u in users if (u.name, u.account) == ("alice", "nlp"))


def test_a_user_associations_own_limits_and_fairshare_are_drift_and_are_reset(lab):
    """Issue #24.8: MaxJobs and Fairshare set on a member's association with sacctmgr are reported
    field by field, then reset under `correct`."""
    _synced(lab)
    changes = _alices_drift(lab, "MaxJobs=3", "Fairshare=9")
    assert changes["fairshare"]["actual"] == 9 and changes["limits"]["actual"] == {"maxjobs": "3"}
    alice = _alice_corrected(lab)
    assert (alice.fairshare, alice.limits) == (1, {})
    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm, mode="drift_check").status == SyncStatus.IN_SYNC


def test_a_user_associations_own_qos_and_default_qos_are_drift_and_are_reset(lab):
    """Issue #41: after `set QOS+=normal DefaultQOS=normal` on a member's association, her jobs without
    --qos ran under normal (outside every Allot limit) and no sync saw it. Reported field by field, then
    reset to the account's under `correct`; a sync after it writes nothing."""
    _synced(lab)
    accounts, users, _, _ = Sacctmgr().read("lab")
    nlp = next(a for a in accounts if a.name == "nlp")
    alice = next(u for u in users if (u.name, u.account) == ("alice", "nlp"))
    assert (alice.qos, alice.default_qos) == (nlp.qos, nlp.default_qos)  # inherited, as show assoc prints it
    changes = _alices_drift(lab, "QOS+=normal", "DefaultQOS=normal")
    assert "normal" in changes["qos"]["actual"] and changes["defaultqos"]["actual"] == "normal"
    alice = _alice_corrected(lab)
    assert (alice.qos, alice.default_qos) == (nlp.qos, nlp.default_qos)
    assert cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm, mode="drift_check").status == SyncStatus.IN_SYNC


def test_the_dry_run_prints_the_partial_dump_it_would_load(lab, capsys):
    from django.core.management import call_command

    cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    unit = services.org_unit_create(actor=lab.admin, reason="t", parent=lab.ops, kind="team", slug="dumped")
    services.quota_set(
        actor=lab.admin, reason="t", unit_id=unit.pk, flavor_id=lab.slurm_flavor.pk, resource=Resource.GPU, guarantee=1
    )
    services.membership_add(actor=lab.admin, reason="t", unit=unit, slurm_username="bob")
    call_command("allot_sync", "--cluster", lab.slurm.name, "--dry-run", "--reason", "look")
    out = capsys.readouterr().out
    assert "the partial dump below" in out
    assert "        Parent - 'ops'" in out and "        Account - 'dumped'" in out
    assert "        Parent - 'dumped'" in out and "        User - 'bob':DefaultAccount='dumped'" in out


# Every form a job can ask for GPUs in, as real sbatch submissions, against vision (ceiling 2 A100:
# guarantee 1 + burst 1). (argv, GPUs the job asks for in all); above 2 job_submit.lua must refuse.
GPU_REQUESTS = [
    (("--gres=gpu:a100:2",), 2),
    (("--gres=gpu:a100:3",), 3),
    (("--gres=gpu:3",), 3),  # untyped: made the account's only GPU type (A100)
    (("--gres=gpu:1",), 1),
    (("-N", "2", "--gres=gpu:a100:2"), 4),  # per node × nodes
    (("--gpus=a100:2",), 2),
    (("--gpus=3",), 3),
    (("--gpus-per-node=a100:2",), 2),
    (("-N", "2", "--gpus-per-node=2"), 4),
    (("-n", "2", "--gpus-per-task=a100:1"), 2),
    (("-n", "2", "--gpus-per-task=3"), 6),  # the bypass: 6 GPUs on a ceiling of 4
    (("--ntasks-per-node=3", "--gpus-per-task=a100:1"), 3),  # tasks from tasks per node
    (("--sockets-per-node=2", "--gpus-per-socket=a100:2"), 4),  # per socket × sockets × nodes
]


def test_every_form_of_gpu_request_is_counted_against_the_ceiling_and_a_tier_refuses_long_jobs(lab):
    import time
    from pathlib import Path

    from quotas.services.slurm_policy import slurm_policy_publish

    services.tier_set(
        actor=lab.admin, reason="t", name="P2", display_name="Interactive", priority=1000, max_runtime=4 * 3600
    )
    cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    policy = slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
    assert policy["accounts"]["vision"]["gpus"] == {"a100": 2} and policy["qos_max_minutes"] == {"tier-p2": 240}
    assert _sh("bash", "deploy/slurm/install-job-submit.sh").returncode == 0
    time.sleep(2)
    held = []
    try:
        for extra, asked in GPU_REQUESTS:
            done = _sh(
                "sbatch", "-A", "vision", "-H", "-t", "5", "--chdir=/tmp", "-o", "/dev/null", *extra,
                "--wrap", "true", user="bob",
            )  # fmt: skip
            if asked <= 1:
                assert done.returncode == 0, (extra, done.stderr)
                held.append(done.stdout.split()[-1])
                if extra == ("--gres=gpu:1",):  # placed on, and counted against, the A100 limits
                    shown = _sh("scontrol", "show", "job", held[-1]).stdout
                    assert "gpu:a100:1" in shown, shown
            elif asked == 2:  # within vision's ceiling, above what one of its QOS can hold: would pend forever
                assert (
                    done.returncode != 0 and "Allot: 2 A100 GPUs can never start under QOS guar-vision" in done.stderr
                )
            else:
                assert done.returncode != 0 and f"Allot: {asked} " in done.stderr, (extra, done.stderr)
                assert "account vision (acme/research/vision) can ever hold: 2" in done.stderr, (extra, done.stderr)
        long = _sh("sbatch", "-A", "vision", "-H", "--qos=tier-p2", "-t", "300", "--wrap", "true", user="bob")
        assert long.returncode != 0 and "QOS tier-p2 allows jobs of at most 240 minutes (300 asked)" in long.stderr
        services.quota_set(
            actor=lab.admin, reason="t", unit_id=lab.ops.pk, flavor_id=lab.slurm_flavor.pk, resource=Resource.GPU,
            guarantee=0,
        )  # fmt: skip
        services.membership_add(actor=lab.admin, reason="t", unit=lab.ops, slurm_username="bob")
        cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
        slurm_policy_publish(cluster=lab.slurm, out=Path("/etc/slurm/allot-policy"))
        for _ in range(30):  # job_submit.lua looks for a new snapshot every 10 s
            none = _sh("sbatch", "-A", "ops", "-H", "--gres=gpu:a100:1", "-t", "5", "--wrap", "true", user="bob")
            if none.returncode == 0:
                held.append(none.stdout.split()[-1])
                time.sleep(1)
                continue
            break
        assert "account ops (acme/ops) has no A100 GPU quota: ask your team lead for one in Allot" in none.stderr
    finally:  # leave a clean cluster: no job left that would block the next test's sync
        for job in held:
            _sh("scancel", job)
        for job in held:
            _wait(job, {""}, seconds=60)


def test_a_saved_edit_reaches_slurm_and_its_snapshot_by_itself_linked_from_the_history(
    lab, settings, tmp_path, monkeypatch, django_capture_on_commit_callbacks, admin_client
):
    import json

    from quotas.tasks import enforce_cluster

    services.cluster_set(actor=lab.admin, reason="t", name=lab.cluster.name, enabled=False)  # only Slurm here
    first = cluster_sync(actor=lab.admin, reason="t", cluster=lab.slurm)
    assert first.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC), [
        (o.name, o.outcome, o.message) for o in SyncObject.objects.filter(run=first)
    ]
    settings.ALLOT_ENFORCE_ON_CHANGE = True
    settings.ALLOT_SLURM_POLICY_OUT = str(tmp_path / "{cluster}-policy")
    from django.core.cache import cache

    cache.clear()
    monkeypatch.setattr(enforce_cluster, "apply_async", lambda args, countdown: enforce_cluster.apply(args=args))
    with django_capture_on_commit_callbacks(execute=True):
        services.quota_set(
            actor=lab.admin, reason="more for nlp", unit_id=lab.nlp.pk, flavor_id=lab.slurm_flavor.pk,
            resource=Resource.GPU, guarantee=5,
        )  # fmt: skip
    _, _, qos, _ = Sacctmgr().read("lab")
    assert {q.name: q for q in qos}["guar-nlp"].grp_tres == {"gres/gpu:a100": 3, "gres/gpu": 3}  # 5 less llm's 2
    published = json.loads((tmp_path / "slurm-lab-policy.json").read_text())
    assert published["accounts"]["nlp"]["gpus"] == {"a100": 7}
    run = SyncRun.objects.filter(cluster=lab.slurm, reason__startswith="enforce").latest("id")
    page = admin_client.get(f"/units/{lab.nlp.pk}/history/").content.decode()
    assert f"slurm-lab: run {run.pk}" in page and f"/sync-runs/{run.pk}/" in page


def test_the_demo_runs_end_to_end_on_the_local_stack(demo):
    """Issue #16.9: `./dev run` (allot_demo, then allot_demo_slurm) with local-slurm.sh up is a working
    demo: slurm-lab's H100 accounts synced, the snapshot published, job_submit.lua installed, and the
    stack's node has H100s — a typed H100 job in nlp is accepted, an untyped one is made H100, one above
    nlp's ceiling or asking for A100 (no quota) is refused with the reason."""
    import json
    import time
    from io import StringIO
    from pathlib import Path

    from django.core.management import call_command

    from quotas.demo import SLURM_USERS

    unix_users(*sorted({u for users in SLURM_USERS.values() for u in users}))
    out = StringIO()
    call_command("allot_demo_slurm", stdout=out)
    text = out.getvalue()
    assert "synced slurm-lab into Slurm cluster 'lab'" in text and "published policy version" in text, text
    assert "installed job_submit.lua" in text, text
    assert "gpu:h100:8" in _sh("scontrol", "show", "node").stdout  # the node has the demo's GPU type
    policy = json.loads(Path("/etc/slurm/allot-policy.json").read_text())
    ceiling = policy["accounts"]["nlp"]["gpus"]["h100"]
    held = []
    try:
        for _ in range(30):  # job_submit.lua looks for a new snapshot every 10 s
            typed = _sh("sbatch", "-A", "nlp", "-H", "--gres=gpu:h100:1", "-t", "5", "--wrap", "true", user="alice")
            if typed.returncode == 0:
                break
            time.sleep(1)
        assert typed.returncode == 0, typed.stderr
        held.append(typed.stdout.split()[-1])
        untyped = _sh("sbatch", "-A", "nlp", "-H", "--gres=gpu:1", "-t", "5", "--wrap", "true", user="alice")
        assert untyped.returncode == 0, untyped.stderr
        held.append(untyped.stdout.split()[-1])
        assert "gpu:h100:1" in _sh("scontrol", "show", "job", held[-1]).stdout
        over = _sh(
            "sbatch", "-A", "nlp", "-H", f"--gres=gpu:h100:{ceiling + 1}", "-t", "5", "--wrap", "true", user="alice"
        )  # fmt: skip
        assert over.returncode != 0 and f"can ever hold: {ceiling}" in over.stderr, over.stderr
        a100 = _sh("sbatch", "-A", "nlp", "-H", "--gres=gpu:a100:1", "-t", "5", "--wrap", "true", user="alice")
        assert a100.returncode != 0 and "has no A100 GPU quota" in a100.stderr, a100.stderr
    finally:
        for job in held:
            _sh("scancel", job)
        for job in held:
            _wait(job, {""}, seconds=60)
