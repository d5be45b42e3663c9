"""Reads for the admission webhooks: the compiled policy of one cluster."""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from admission.policy.model import AdmissionPolicy, compile_policy
from quotas.models import Cluster, ClusterKind, Membership, OrgUnit, ResourceFlavor
from quotas.policy.kueue.multikueue import manager_flavors, manager_snapshot
from quotas.selectors import fleet_targets, kueue_target, org_snapshot, policy_revision


def admission_cluster() -> Cluster:
    """The cluster this webhook deployment serves: ALLOT_ADMISSION_CLUSTER, or the only one."""
    name = settings.ALLOT_ADMISSION_CLUSTER
    clusters = Cluster.objects.filter(kind=ClusterKind.KUBERNETES)
    if name:
        found = clusters.filter(name=name).first()
        if found is None:
            raise ImproperlyConfigured(f"ALLOT_ADMISSION_CLUSTER={name!r} is not a Kubernetes cluster in Allot")
        return found
    only = list(clusters[:2])
    if len(only) != 1:
        raise ImproperlyConfigured("set ALLOT_ADMISSION_CLUSTER: there is not exactly one Kubernetes cluster")
    return only[0]


def admission_policy(cluster: Cluster) -> AdmissionPolicy:
    """Everything the webhook needs, compiled in a handful of queries."""
    members: dict[int, set[str]] = {}
    leads: dict[int, set[str]] = {}
    for unit_id, username, slurm in Membership.objects.values_list("unit_id", "user__username", "slurm_username"):
        members.setdefault(unit_id, set()).update(n for n in (username, slurm) if n)
    for unit_id, username in OrgUnit.leads.through.objects.values_list("orgunit_id", "user__username"):
        members.setdefault(unit_id, set()).add(username)
        leads.setdefault(unit_id, set()).add(username)
    allowed: dict[int, set[str]] = {}
    for unit_id, tier in OrgUnit.allowed_tiers.through.objects.values_list("orgunit_id", "workloadtier__name"):
        allowed.setdefault(unit_id, set()).add(tier)
    memory = {
        f"{cluster.name}/{name}": gb
        for name, gb in ResourceFlavor.objects.filter(cluster=cluster).values_list("name", "device_memory_gb")
    }
    snapshot, target = org_snapshot(), kueue_target(cluster)
    fleet = fleet_targets(cluster)
    if fleet is not None and fleet[0].manager == cluster.name:
        # a MultiKueue manager: its queues hold each unit's quota summed over the workers, on flavors named
        # as theirs (quotas.policy.kueue.multikueue); judge what is submitted there against that
        spec, _, workers = fleet
        names = {f.key: f.name for w in workers.values() for f in w.flavors}
        snapshot = manager_snapshot(snapshot, spec, names)
        # pins name the workers' node labels (the pods run there): judge them by those (issue #40.4)
        labels: dict[str, dict[str, str]] = {}
        for w in workers.values():
            for f in w.flavors:
                labels.setdefault(f.name, dict(f.node_labels))
        flavors = tuple(replace(f, node_labels=labels.get(f.name, {})) for f in manager_flavors(spec, workers))
        target = replace(target, flavors=flavors)
        for w in workers.values():
            for name, gb in ResourceFlavor.objects.filter(cluster__name=w.cluster).values_list(
                "name", "device_memory_gb"
            ):
                key = f"{cluster.name}/{name}"
                memory[key] = max(memory.get(key, 0), gb)
    policy = compile_policy(
        snapshot,
        target,
        members={u: frozenset(m) for u, m in members.items()},
        allowed_tiers={u: frozenset(t) for u, t in allowed.items()},
        flavor_memory=memory,
        leads={u: frozenset(m) for u, m in leads.items()},
    )
    return replace(
        policy,
        exempt_namespaces=frozenset(settings.ALLOT_ADMISSION_EXEMPT_NAMESPACES),
        accelerators=dict(settings.ALLOT_ACCELERATORS),
        controllers=frozenset(settings.ALLOT_ADMISSION_CONTROLLERS),
        ungoverned_gpu=settings.ALLOT_ADMISSION_UNGOVERNED_GPU,
    )


__all__ = ["admission_cluster", "admission_policy", "policy_revision"]
