from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.errors import InputError
from quotas.models import Cluster, SyncMode, SyncObject, SyncOutcome, SyncStatus
from quotas.services.sync import cluster_sync

EXIT_CODES = {
    SyncStatus.FAILED: 1,  # the cluster could not be read or written (unreachable, refused credentials)
    SyncStatus.INVALID: 1,  # the compiled objects failed validation: nothing applied
    SyncStatus.PARTIAL: 4,  # some objects were (or, with --dry-run, would be) refused, each says why; the rest applied
    SyncStatus.DRIFT: 3,  # --drift found objects changed out of band (reported, not corrected)
}
"""0: in sync, applied, or (with --dry-run) changes to make; 2: bad arguments (Django's usage error)."""


class Command(BaseCommand):
    help = (
        "Sync a cluster with the organisation tree: compile, validate, dry-run, apply (Kueue clusters). "
        "Exit codes: 0 in sync or applied (or, with --dry-run, changes listed), 1 the cluster could not be "
        "read or written or the compiled objects are invalid, 3 drift found (--drift, policy report), "
        "4 some objects refused or not Allot's (each says why; the rest applied; with --dry-run: would be)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name, e.g. k8s-west")
        parser.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")
        parser.add_argument("--drift", action="store_true", help="only report objects changed out of band")
        parser.add_argument("--reason", default="manual sync from the command line", help="kept in the audit trail")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            names = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none yet"
            raise CommandError(f"no cluster {options['cluster']!r}; known clusters: {names}")
        mode = SyncMode.DRY_RUN if options["dry_run"] else SyncMode.DRIFT_CHECK if options["drift"] else SyncMode.APPLY
        try:
            run = cluster_sync(actor=None, reason=options["reason"], cluster=cluster, mode=mode)
        except InputError as exc:
            raise CommandError(str(exc)) from exc
        for obj in SyncObject.objects.filter(run=run).exclude(outcome=SyncOutcome.UNCHANGED):
            where = f"{obj.kind} {obj.namespace + '/' if obj.namespace else ''}{obj.name}"
            self.stdout.write(f"  {obj.outcome:<13} {where}{': ' + obj.message if obj.message else ''}")
            for change in obj.changes:
                self.stdout.write(f"      {change['path']}: {change['actual']!r} → {change['desired']!r}")
            if (obj.details or {}).get("file"):  # the partial dump a `sacctmgr -i load` reads
                self.stdout.write("      the partial dump below, as `sacctmgr -i load file=<it>` reads it:")
                for line in obj.details["file"].splitlines():
                    self.stdout.write(f"        {line}")
        summary = ", ".join(f"{n} {outcome}" for outcome, n in run.counts.items()) or "no objects"
        self.stdout.write(
            f"sync run {run.pk} of {cluster.name} ({run.mode}): {run.get_status_display()}. {summary}. {run.message}"
        )
        not_ours = run.counts.get(SyncOutcome.NOT_OURS.value, 0)
        if not_ours:
            self.stdout.write(f"note: {not_ours} object(s) with Allot's names are not Allot's and were left alone")
        code = EXIT_CODES.get(SyncStatus(run.status), 0)
        if code:
            raise CommandError(f"sync of {cluster.name}: {run.get_status_display()} — {run.message}", returncode=code)
