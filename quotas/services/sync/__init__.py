"""Keep each cluster in sync with the tree: Kueue objects on Kubernetes (:mod:`.kueue`), accounts,
user associations and QOS on Slurm (:mod:`.slurm`), both recorded the same way (:mod:`.run`). One
entry point, :func:`cluster_sync`, for both."""

from __future__ import annotations

from quotas.integrations.kubernetes import KueueClient
from quotas.models import Cluster, ClusterKind, SyncMode, SyncRun

from ..audit import Actor
from .kueue import kueue_sync
from .slurm import slurm_sync


def cluster_sync(
    *, actor: Actor, reason: str, cluster: Cluster, mode: str = SyncMode.APPLY, client: KueueClient | None = None
) -> SyncRun:
    """Sync ``cluster`` (see the module docstring). Returns the recorded :class:`SyncRun`.

    Raises InputError for a reason missing, a cluster that is disabled;
    every problem with the cluster itself is recorded in the run, not raised.
    """
    if cluster.kind == ClusterKind.SLURM and cluster.enabled:
        return slurm_sync(actor=actor, reason=reason, cluster=cluster, mode=mode)
    return kueue_sync(actor=actor, reason=reason, cluster=cluster, mode=mode, client=client)
