"""Sampling the fragmentation index (accounting.policy.fragmentation) each hour, per flavor of every
cluster Allot can reach: Slurm through ``scontrol show node -o`` and ``squeue``, Kubernetes through
the official client (Nodes and non-finished Pods). One row a flavor and hour (a rerun replaces it);
a cluster that does not answer is reported in the result, never half-written."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounting.models import FragmentationSample
from accounting.policy.fragmentation import (
    Fragmentation,
    NodeGpus,
    PendingShape,
    fragmentation,
    kube_inventory,
    parse_scontrol_nodes,
    parse_squeue_pending,
)
from quotas.integrations.kubernetes import ClusterCallError
from quotas.integrations.slurm import SlurmError, SlurmInventory
from quotas.models import Cluster, ClusterKind, ResourceFlavor

Inventory = tuple[list[NodeGpus], list[PendingShape]]


def slurm_inventory(cluster: Cluster, reader: SlurmInventory | None = None) -> Inventory:
    from accounting.services.ingest import slurm_cluster_name

    reader = reader or SlurmInventory(scontrol=settings.ALLOT_SLURM_SCONTROL, squeue=settings.ALLOT_SLURM_SQUEUE)
    name = slurm_cluster_name(cluster)
    return parse_scontrol_nodes(reader.nodes(name)), parse_squeue_pending(reader.pending(name))


def kube_cluster_inventory(cluster: Cluster, client: Any = None) -> Inventory:
    from accounting.services.kueue import kueue_client

    client = client or kueue_client(cluster)
    labels = {f.name: dict(f.node_labels or {}) for f in ResourceFlavor.objects.filter(cluster=cluster)}
    nodes = client.list_core("nodes")
    pods = client.list_core("pods", field_selector="status.phase!=Succeeded,status.phase!=Failed")
    return kube_inventory(nodes, pods, labels)


def fragmentation_sample(
    *, cluster: Cluster, at: datetime | None = None, read: Callable[[Cluster], Inventory] | None = None
) -> list[Fragmentation]:
    """Sample every flavor of ``cluster`` at the hour of ``at`` (default now) and store it.
    Raises SlurmError / ClusterCallError / ValueError when the cluster cannot be read."""
    at = (at or timezone.now()).replace(minute=0, second=0, microsecond=0)
    reader = read or (slurm_inventory if cluster.kind == ClusterKind.SLURM else kube_cluster_inventory)
    nodes, pending = reader(cluster)
    flavors = list(ResourceFlavor.objects.filter(cluster=cluster).order_by("name"))
    found = [(f, fragmentation(f.name, nodes, pending)) for f in flavors]
    with transaction.atomic():
        FragmentationSample.objects.filter(flavor__in=flavors, at=at).delete()
        FragmentationSample.objects.bulk_create(
            FragmentationSample(
                flavor=f, at=at, nodes=x.nodes, total=x.total, used=x.used, free=x.free, usable=x.usable,
                index=x.index, largest_block=x.largest_block, whole_free_nodes=x.whole_free_nodes,
                pending_gpus=x.pending_gpus, waiting=list(x.waiting)[:50],
                blocks={str(k): v for k, v in x.blocks.items()},
                placeable={str(k): v for k, v in x.placeable.items()},
            )
            for f, x in found
            if x.nodes
        )  # fmt: skip
    return [x for _, x in found if x.nodes]


def fragmentation_sample_all(at: datetime | None = None) -> dict[str, Any]:
    """Every enabled cluster with a connection: sampled, or the reason it could not be."""
    result: dict[str, Any] = {}
    for cluster in Cluster.objects.filter(enabled=True).exclude(connection_ref="").order_by("name"):
        try:
            result[cluster.name] = {x.flavor: x.index for x in fragmentation_sample(cluster=cluster, at=at)}
        except (SlurmError, ClusterCallError, ValueError) as exc:
            result[cluster.name] = {"error": str(exc)}
    return result


def fragmentation_found(end: datetime, th: Any) -> list[Any]:
    """The fragmentation findings of the 24 hours ending at ``end`` (one grouped read of the samples)."""
    from datetime import timedelta

    from accounting.policy.fragmentation import Sampled, fragmentation_findings

    start = end - timedelta(hours=24)
    rows = FragmentationSample.objects.filter(at__gte=start, at__lt=end).select_related("flavor__cluster")
    samples = [
        Sampled(r.flavor_id, r.flavor.key, r.at, r.free, r.usable, r.index, r.largest_block, r.pending_gpus,
                tuple(r.waiting))
        for r in rows
    ]  # fmt: skip
    return fragmentation_findings(samples, th, start, end)
