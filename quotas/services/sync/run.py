"""What every sync records, whatever its target: per-object outcomes collected during the run and
written once at the end, atomically, with the audit row when it changed something."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from quotas.models import (
    Cluster,
    OrgUnit,
    QueueUsage,
    SyncObject,
    SyncOutcome,
    SyncRun,
)
from quotas.policy.kueue.usage import QueueUsage as QueueUsageLine

from ..audit import Actor, audit_event, audit_write

Key = tuple[str, str, str]


class RunRecord:
    """Collects outcomes; written once at the end."""

    def __init__(self, run: SyncRun) -> None:
        self.run = run
        self.objects: list[SyncObject] = []
        self.usage: list[QueueUsageLine] | None = None
        self.notes: list[str] = []

    def add(
        self,
        key: Key,
        outcome: SyncOutcome,
        *,
        changes: Any = (),
        message: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        kind, namespace, name = key
        self.objects.append(
            SyncObject(
                run=self.run,
                kind=kind,
                namespace=namespace,
                name=name,
                outcome=outcome,
                changes=[c.as_dict() for c in changes],
                message=message,
                details=dict(details or {}),
            )
        )

    def count(self, *outcomes: SyncOutcome) -> int:
        return sum(o.outcome in outcomes for o in self.objects)


def record_usage(cluster: Cluster, usage: list[QueueUsageLine], at: Any) -> None:
    """Replace the cluster's usage with what this read saw: two statements, whatever the size."""
    units = dict(
        OrgUnit.objects.filter(path__in={u.unit_path for u in usage}, archived_at__isnull=True).values_list(
            "path", "pk"
        )
    )
    QueueUsage.objects.filter(cluster=cluster).delete()
    QueueUsage.objects.bulk_create(
        [
            QueueUsage(
                cluster=cluster,
                unit_id=units.get(u.unit_path),
                queue=u.queue,
                flavor=u.flavor,
                resource=u.resource.value,
                total=u.total,
                borrowed=u.borrowed,
                observed_at=at,
            )
            for u in usage
        ],
        batch_size=1000,
    )


@transaction.atomic
def record_run(run: RunRecord, actor: Actor) -> SyncRun:
    record = run.run
    record.finished_at = timezone.now()
    if run.notes:
        record.message = "; ".join([record.message, *run.notes]) if record.message else "; ".join(run.notes)
    counts: dict[str, int] = {}
    for obj in run.objects:
        counts[obj.outcome] = counts.get(obj.outcome, 0) + 1
    record.counts = {**dict(sorted(counts.items())), **record.counts}
    record.save()
    SyncObject.objects.bulk_create(run.objects, batch_size=1000)
    if run.usage is not None:
        record_usage(record.cluster, run.usage, record.started_at)
    if run.count(SyncOutcome.CREATED, SyncOutcome.UPDATED, SyncOutcome.DELETED):
        audit_write(
            [
                audit_event(
                    actor=actor,
                    action="cluster_sync",
                    obj_type="cluster",
                    obj_id=record.cluster_id,
                    obj_repr=record.cluster.name,
                    before=None,
                    after={"run": record.pk, "status": record.status, "counts": record.counts},
                    reason=record.reason,
                )
            ]
        )
    return record
