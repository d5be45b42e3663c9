from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.models import Cluster
from quotas.services.slurm_policy import slurm_policy_publish


class Command(BaseCommand):
    help = "Publish the policy snapshot a Slurm controller's job_submit.lua enforces (<out>.lua and <out>.json)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="a Slurm cluster, e.g. slurm-lab")
        parser.add_argument(
            "--out",
            type=Path,
            default=Path("/etc/slurm/allot-policy"),
            help="path without suffix (default /etc/slurm/allot-policy)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {options['cluster']!r}")
        try:
            policy = slurm_policy_publish(cluster=cluster, out=options["out"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"published policy version {policy['version']} for {len(policy['accounts'])} accounts to "
            f"{options['out']}.lua and .json"
        )
