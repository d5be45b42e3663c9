"""MultiKueue fleets: a manager cluster and its ordered workers (quotas.policy.kueue.multikueue)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from quotas.errors import InputError
from quotas.models import Cluster, ClusterKind, Fleet, FleetWorker
from quotas.policy.kueue.multikueue import Fleet as FleetSpec
from quotas.policy.kueue.multikueue import Worker, fleet_problems

from .audit import Actor, audit_event, audit_write, require_reason


def fleet_state(fleet: Fleet) -> dict[str, Any]:
    return {
        "manager": fleet.manager.name,
        "workers": [[w.cluster.name, w.kubeconfig_secret] for w in fleet.workers.select_related("cluster")],
        "quota_automation": fleet.quota_automation,
    }


@transaction.atomic
def fleet_set(
    *,
    actor: Actor,
    reason: str,
    name: str,
    manager: Cluster,
    workers: Sequence[tuple[Cluster, str]],
    quota_automation: bool = False,
) -> Fleet:
    """Create or replace the fleet ``name``: its manager and its workers in order, each with the name of its
    kubeconfig Secret. Refused (InputError naming the field) when Kueue would refuse the fleet or a cluster
    is not a Kubernetes cluster or already in another fleet."""
    reason = require_reason(reason)
    spec = FleetSpec(name, manager.name, tuple(Worker(c.name, secret) for c, secret in workers), quota_automation)
    problems = fleet_problems(spec)
    if problems:
        raise InputError("workers", "; ".join(problems))
    for cluster in [manager, *(c for c, _ in workers)]:
        if cluster.kind != ClusterKind.KUBERNETES:
            raise InputError("workers", f"{cluster.name} is a {cluster.kind} cluster", "a fleet is Kueue clusters")
    existing = Fleet.objects.select_for_update().filter(name=name).first()
    taken = (
        FleetWorker.objects.filter(cluster__in=[c for c, _ in workers])
        .exclude(fleet__name=name)
        .select_related("cluster", "fleet")
    )
    for worker in taken:
        raise InputError("workers", f"{worker.cluster.name} is already a worker of fleet {worker.fleet.name}")
    if Fleet.objects.filter(manager=manager).exclude(name=name).exists():
        raise InputError("manager", f"{manager.name} already manages another fleet")
    before = fleet_state(existing) if existing else None
    fleet = existing or Fleet(name=name, manager=manager)
    fleet.manager, fleet.quota_automation = manager, quota_automation
    fleet.save()
    fleet.workers.all().delete()
    FleetWorker.objects.bulk_create(
        [
            FleetWorker(fleet=fleet, cluster=c, position=i, kubeconfig_secret=secret)
            for i, (c, secret) in enumerate(workers)
        ]
    )
    audit_write(
        [
            audit_event(
                actor=actor,
                action="fleet_set",
                obj_type="fleet",
                obj_id=fleet.pk,
                obj_repr=name,
                before=before,
                after=fleet_state(fleet),
                reason=reason,
            )
        ]
    )
    return fleet
