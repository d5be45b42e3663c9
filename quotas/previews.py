"""What a proposed change would do, before anyone commits it: the same code paths as the real
edit (the core's checks) and the real sync (compile + plan), on a proposed snapshot. Reads only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.core.cache import cache

from quotas.models import Cluster, ClusterKind, OrgUnit
from quotas.policy.invariants import check_quota_edits
from quotas.policy.kueue import compile_kueue
from quotas.policy.kueue.diff import Action, ObjectPlan, preview
from quotas.policy.kueue.reach import reachable
from quotas.policy.kueue.target import CompileError, kueue_name
from quotas.policy.slurm.diff import preview_slurm
from quotas.policy.slurm.translate import compile_slurm
from quotas.policy.snapshot import OrgSnapshot
from quotas.policy.violations import Violation
from quotas.selectors import flavor_keys, kueue_target, org_snapshot, policy_revision, slurm_target
from quotas.services.quota import QuotaChange, proposed_quota


@dataclass(frozen=True)
class Preview:
    violations: list[Violation]
    clusters: dict[str, list[ObjectPlan]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "violations": [v.as_dict() for v in self.violations],
            "clusters": {
                name: [
                    {
                        "kind": p.kind,
                        "namespace": p.namespace,
                        "name": p.name,
                        "action": p.action.value,
                        "changes": [c.as_dict() for c in p.changes],
                    }
                    for p in plans
                ]
                for name, plans in self.clusters.items()
            },
        }


def quota_change_preview(changes: Sequence[QuotaChange], snapshot: OrgSnapshot | None = None) -> Preview:
    """Violations the changes would cause, and per cluster the exact diff: Kueue objects on
    Kubernetes clusters, QOS / accounts / user associations on Slurm clusters."""
    snapshot = snapshot or org_snapshot()  # a caller that read the whole tree already passes it
    keys = flavor_keys()
    edits = {}
    for change in changes:
        key = (change.unit_id, keys[change.flavor_id], change.resource)
        edits[key] = proposed_quota(change, snapshot.quotas.get(key))
    violations = check_quota_edits(snapshot, edits)
    proposed = replace(snapshot, quotas={**snapshot.quotas, **edits})
    clusters = {}
    for cluster in Cluster.objects.filter(kind=ClusterKind.KUBERNETES, enabled=True).order_by("name"):
        target = kueue_target(cluster)
        clusters[cluster.name] = preview(compile_kueue(snapshot, target), compile_kueue(proposed, target))
    actions = {"add": Action.CREATE, "modify": Action.UPDATE, "delete": Action.DELETE}
    for cluster in Cluster.objects.filter(kind=ClusterKind.SLURM, enabled=True).order_by("name"):
        try:
            slurm = slurm_target(cluster)
        except ValueError:  # no usable connection_ref: its syncs say so
            continue
        commands = preview_slurm(compile_slurm(snapshot, slurm), compile_slurm(proposed, slurm))
        clusters[cluster.name] = [
            ObjectPlan(f"Slurm {c.kind}", "", c.name, actions[c.action], c.changes) for c in commands
        ]
    return Preview(violations, clusters)


def kueue_reach(unit_id: int) -> dict[str, int]:
    """Flavor key → the most GPUs the unit's own ClusterQueue can ever be admitted on a Kubernetes cluster,
    with the rest of the tree idle (quotas.policy.kueue.reach: what the admission webhook enforces where it
    is below the tree's ceiling). Units without a queue of their own on a cluster have no entry. Cached
    per policy revision in the shared cache."""
    revision = policy_revision()
    key = f"allot:kueue-reach:{revision}"
    found: dict[tuple[str, str], int] | None = cache.get(key)
    if found is None:
        found = {}
        snapshot = org_snapshot()
        for cluster in Cluster.objects.filter(kind=ClusterKind.KUBERNETES, enabled=True):
            try:
                objects = compile_kueue(snapshot, replace(kueue_target(cluster), at=None))
            except CompileError:
                continue
            for (queue, flavor, resource), value in reachable(objects).items():
                if resource == "nvidia.com/gpu":
                    found[(queue, f"{cluster.name}/{flavor}")] = int(value)
        cache.set(key, found, 3600)
    unit = OrgUnit.objects.filter(pk=unit_id).values("kueue_name", "path").first()
    if unit is None:
        return {}
    queue = unit["kueue_name"] or kueue_name(unit["path"])
    return {flavor: value for (name, flavor), value in found.items() if name == queue}
