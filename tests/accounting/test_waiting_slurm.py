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

from accounting.services.waiting import explain_slurm_job
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
        other = next(w for w, problem in answer.ways_out if w.kind == "other-qos")
        assert "--qos=burst-nlp" in other.text
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
        stranger = User.objects.create_user("bob-web")
        theirs = subprocess.run([plugin, waiting], capture_output=True, text=True,
                                env={**env, "ALLOT_TOKEN": Token.objects.create(user=stranger).key})  # fmt: skip
        assert theirs.returncode == 1 and "Allot answered 404" in theirs.stderr
    finally:
        for user in ("alice", "bob", "dave"):
            _sh("scancel", "-u", user)
