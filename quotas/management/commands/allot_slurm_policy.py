from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.models import Cluster
from quotas.services.slurm_policy import slurm_export, slurm_policy_publish


class Command(BaseCommand):
    help = (
        "Publish the policy snapshot a Slurm controller's job_submit.lua enforces (<out>.lua and <out>.json); "
        "with --export-dir, also write the accounts as a sacctmgr dump and the QOS script for loading by hand."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="a Slurm cluster, e.g. slurm-lab")
        parser.add_argument(
            "--out",
            type=Path,
            default=Path("/etc/slurm/allot-policy"),
            help="path without suffix (default /etc/slurm/allot-policy)",
        )
        parser.add_argument(
            "--export-dir",
            type=Path,
            help="also write <cluster>-qos.sh and <cluster>.cfg here: run the script, then sacctmgr -i load file=…",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {options['cluster']!r}")
        try:
            policy = slurm_policy_publish(cluster=cluster, out=options["out"])
            exported = slurm_export(cluster=cluster, out_dir=options["export_dir"]) if options["export_dir"] else []
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"published policy version {policy['version']} for {len(policy['accounts'])} accounts to "
            f"{options['out']}.lua and .json"
        )
        if policy.get("inventory_error"):
            self.stderr.write(
                "warning: slurmctld's nodes could not be read, so --exclusive jobs (given every GPU of their node) "
                f"are not counted until the next publish: {policy['inventory_error']}"
            )
        for path in exported:
            self.stdout.write(f"wrote {path}")
