from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.errors import InputError
from quotas.integrations.slurm import QOS_FORMAT, Sacctmgr, SlurmError
from quotas.models import Cluster, ClusterKind, ResourceFlavor, SubtreeCeilings
from quotas.policy.slurm.importer import parse_dump, read_slurm
from quotas.policy.slurm.parse import parse_qos
from quotas.policy.slurm.translate import slurm_cluster_name
from quotas.policy.violations import PolicyViolationError
from quotas.services.slurm_import import slurm_import


class Command(BaseCommand):
    help = (
        "Build units, guarantees, burst, contracts, tiers and members from an existing Slurm accounting tree: "
        "the live cluster (sacctmgr) or a `sacctmgr dump` file. All or nothing; then `allot_sync --cluster NAME "
        "--dry-run` shows that Allot would change nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="the Allot Slurm cluster to import into, e.g. slurm-lab")
        parser.add_argument("--from-dump", type=Path, help="a `sacctmgr dump <cluster> file=…` file (default: live)")
        parser.add_argument(
            "--qos-file",
            type=Path,
            help="with --from-dump: `sacctmgr -P show qos format=" + ",".join(QOS_FORMAT) + "` output "
            "(a dump has no QOS definitions); default: read the QOS live",
        )
        parser.add_argument("--reason", default="adopted from an existing Slurm accounting tree")
        parser.add_argument(
            "--accept-notes",
            action="store_true",
            help="import although some settings cannot be carried over (each is listed first)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"], kind=ClusterKind.SLURM).first()
        if cluster is None:
            raise CommandError(
                f"no Slurm cluster {options['cluster']!r}: create it (kind slurm, connection_ref slurm:<name>) "
                "and its flavors (one per GPU type, named like the gres type) first"
            )
        devices = dict(ResourceFlavor.objects.filter(cluster=cluster).values_list("name", "physical_devices"))
        flavors = sorted(devices)
        # strict subtree ceilings split each parent's burst among its subtree's burst QOS: read it back whole
        split_from = devices if cluster.subtree_ceilings == SubtreeCeilings.STRICT else None
        if not flavors:
            raise CommandError(f"{cluster.name} has no flavors: add one per GPU type (named like gres/gpu:<type>)")
        runner = Sacctmgr()
        try:
            if options["from_dump"]:
                _, accounts, users = parse_dump(_read(options["from_dump"]))
                qos_text = _read(options["qos_file"]) if options["qos_file"] else None
                qos = parse_qos(qos_text) if qos_text is not None else runner.read_qos()
                plan = read_slurm(accounts, users, qos, flavors=flavors, split_from=split_from)
            else:
                accounts, users, qos, descriptions = runner.read(slurm_cluster_name(cluster.connection_ref))
                plan = read_slurm(
                    accounts, users, qos, flavors=flavors, descriptions=descriptions, split_from=split_from
                )
            if plan.losses and not options["accept_notes"]:
                for loss in plan.losses:
                    self.stdout.write(f"would change: {loss}")
                raise CommandError(
                    f"{len(plan.losses)} setting(s) above cannot be carried over or would change meaning; nothing "
                    "was imported. Read them, then run again with --accept-notes (or change the site's setup first)."
                )
            result = slurm_import(actor=None, reason=options["reason"], cluster=cluster, plan=plan)
        except (ValueError, SlurmError, InputError) as exc:
            raise CommandError(str(exc)) from exc
        except PolicyViolationError as exc:
            raise CommandError(
                f"the Slurm limits break Allot's invariants; nothing was imported:\n{exc.as_lines()}"
            ) from exc
        for note in result.notes:
            self.stdout.write(f"note: {note}")
        self.stdout.write(
            f"imported {result.units} units, {result.quotas} quotas, {result.members} members, "
            f"{result.contracts} contracts, {result.tiers} tiers into {cluster.name}"
        )


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
