"""Sync with a real slurmdbd (the local stack deploy/slurm/local-slurm.sh starts): read with
sacctmgr, plan, apply, read again; a second sync writes nothing; the site's own accounts stay."""

import subprocess

import pytest

from quotas import services
from quotas.integrations.slurm import Sacctmgr
from quotas.models import ClusterKind, SyncObject, SyncOutcome, SyncStatus
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
    org.slurm, org.slurm_flavor = cluster, flavor
    return org


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
    assert by_name["guar-nlp"].grp_tres == {"gres/gpu:a100": 2}  # nlp 4 − llm 2
    assert by_name["burst-nlp"].grp_tres == {"gres/gpu:a100": 2} and by_name["burst-nlp"].preempt_mode == "requeue"
    assert by_name["burst-nlp"].grace_time_s == 120 and by_name["burst-nlp"].preempt_exempt_s == 300
    assert "burst-nlp" in by_name["guar-vision"].preempt
    assert {("alice", "nlp"), ("dave", "nlp"), ("bob", "vision")} <= {(u.name, u.account) for u in users}
    second = cluster_sync(actor=lab.admin, reason="second", cluster=lab.slurm)
    assert second.status == SyncStatus.IN_SYNC and writes(second) == []
    assert second.counts["sacctmgr_calls"] == 6  # two reads of three calls, not one write


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
    assert {q.name: q.grp_tres for q in qos}["guar-nlp"] == {"gres/gpu:a100": 1}
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
    for user in ("alice", "bob"):
        if _sh("id", user).returncode != 0:
            _sh("useradd", "-M", "-s", "/bin/sh", user, check=True)
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
    assert "Allot: 7 a100 GPUs is more than account nlp (acme/research/nlp) can ever hold: 6" in too_big.stderr
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
