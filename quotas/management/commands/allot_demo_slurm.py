"""Put the demo organisation on the local Slurm stack (deploy/slurm/local-slurm.sh), end to end:
sync cluster slurm-lab, publish the job_submit.lua snapshot, install job_submit.lua. ``./dev run``
runs it; without a local Slurm it says so and does nothing."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.demo import SLURM_USERS
from quotas.models import Cluster, SyncStatus
from quotas.services.slurm_policy import slurm_policy_publish
from quotas.services.sync import cluster_sync

INSTALL = Path(__file__).resolve().parents[3] / "deploy" / "slurm" / "install-job-submit.sh"


class Command(BaseCommand):
    help = (
        "Sync the demo's Slurm cluster (slurm-lab) into the local Slurm stack, publish the policy snapshot "
        "job_submit.lua enforces and install job_submit.lua (as root). Does nothing, and says why, without "
        "a local Slurm (start one with deploy/slurm/local-slurm.sh)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", default="slurm-lab", help="the demo's Slurm cluster (default slurm-lab)")
        parser.add_argument(
            "--out",
            type=Path,
            default=Path("/etc/slurm/allot-policy"),
            help="where job_submit.lua reads the snapshot, without suffix (default /etc/slurm/allot-policy)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {options['cluster']!r}: load the demo first (manage.py allot_demo)")
        name = cluster.connection_ref.partition(":")[2]
        if not shutil.which("sacctmgr"):
            self.stdout.write("no local Slurm (no sacctmgr): start one with deploy/slurm/local-slurm.sh; skipped")
            return
        shown = subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "cluster", name, "format=cluster"], capture_output=True, text=True
        )
        if shown.returncode != 0 or shown.stdout.strip() != name:
            self.stdout.write(f"Slurm does not answer for cluster {name!r} (is local-slurm.sh running?); skipped")
            return
        missing = [u for u in sorted({u for users in SLURM_USERS.values() for u in users}) if not _unix_user(u)]
        if missing:
            self.stdout.write(
                f"Unix users missing for the demo's members: {', '.join(missing)} — deploy/slurm/local-slurm.sh "
                "start creates them (their jobs are refused until they exist)"
            )
        run = cluster_sync(actor=None, reason="demo on the local Slurm stack", cluster=cluster)
        self.stdout.write(f"synced {cluster.name} into Slurm cluster {name!r}: {run.status} ({run.counts})")
        if run.status not in (SyncStatus.APPLIED, SyncStatus.IN_SYNC):
            self.stdout.write(f"  {run.message}")
        try:
            policy = slurm_policy_publish(cluster=cluster, out=options["out"])
        except OSError as exc:
            self.stdout.write(f"could not publish the snapshot to {options['out']}: {exc} (run as root)")
            return
        self.stdout.write(f"published policy version {policy['version']} to {options['out']}.lua")
        if os.geteuid() == 0:
            installed = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True)
            self.stdout.write(
                "installed job_submit.lua"
                if installed.returncode == 0
                else f"job_submit.lua not installed: {installed.stdout}{installed.stderr}"
            )
        else:
            self.stdout.write(f"install job_submit.lua as root: sudo bash {INSTALL}")
        self.stdout.write(
            "try it: sudo -u alice sbatch -A nlp --gres=gpu:h100:1 -t 10 --wrap 'sleep 60'  "
            "(refused above the ceiling, with the reason)"
        )


def _unix_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
