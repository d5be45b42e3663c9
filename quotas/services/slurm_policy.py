"""Publish the policy snapshot a Slurm controller enforces (see deploy/slurm/job_submit.lua), and
export the accounts as a ``sacctmgr dump`` file plus the QOS script for sites that load by hand."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from quotas.integrations.slurm import SlurmError, SlurmInventory
from quotas.models import Cluster, ClusterKind, OrgUnit
from quotas.policy.slurm.nodes import partition_gpus
from quotas.policy.slurm.render import qos_script, render_dump
from quotas.policy.slurm.submit import render_json, render_lua, submit_policy
from quotas.policy.slurm.translate import compile_slurm
from quotas.selectors import org_snapshot, policy_revision, slurm_desired, slurm_target


def _atomic_write(path: Path, text: str) -> None:
    """Write next to the target and rename over it: readers see the old file or the new, never half."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def node_inventory(name: str, reader: SlurmInventory | None = None) -> tuple[dict[str, Any] | None, str]:
    """Per partition, the GPUs of its smallest node and whether its jobs have whole nodes, from slurmctld
    (``scontrol -M <name> show node/partition -o``); ``(None, why)`` when it cannot be read."""
    reader = reader or SlurmInventory(scontrol=settings.ALLOT_SLURM_SCONTROL, squeue=settings.ALLOT_SLURM_SQUEUE)
    try:
        return partition_gpus(reader.nodes(name), reader.partitions(name)), ""
    except SlurmError as exc:
        return None, str(exc)


def slurm_policy_publish(*, cluster: Cluster, out: Path, reader: SlurmInventory | None = None) -> dict[str, Any]:
    """Write ``<out>.lua`` and ``<out>.json`` for ``cluster``; returns the policy (``inventory_error`` says why
    whole-node jobs are not counted when slurmctld's nodes could not be read). Raises ValueError for a
    cluster that is not Slurm or has no usable connection_ref."""
    if cluster.kind != ClusterKind.SLURM:
        raise ValueError(f"{cluster.name} is a {cluster.kind} cluster: the snapshot is for Slurm controllers")
    snapshot, target = org_snapshot(), slurm_target(cluster)
    inventory, why = node_inventory(target.cluster, reader)
    archived = [
        a or s for a, s in OrgUnit.objects.filter(archived_at__isnull=False).values_list("slurm_account", "slug")
    ]
    policy = submit_policy(
        snapshot,
        target,
        compile_slurm(snapshot, target),
        revision=policy_revision(),
        archived=archived,
        inventory=inventory,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(out.with_suffix(".json"), render_json(policy))
    _atomic_write(out.with_suffix(".lua"), render_lua(policy))
    return {**policy, "inventory_error": why} if why else policy


def slurm_export(*, cluster: Cluster, out_dir: Path) -> list[Path]:
    """Write ``<name>-qos.sh`` (run first: a dump has no QOS) and ``<name>.cfg`` (``sacctmgr load
    file=…``) for ``cluster``; returns both paths. Raises ValueError for a cluster that is not Slurm."""
    if cluster.kind != ClusterKind.SLURM:
        raise ValueError(f"{cluster.name} is a {cluster.kind} cluster: the dump is for Slurm")
    state = slurm_desired(cluster)
    out_dir.mkdir(parents=True, exist_ok=True)
    script, dump = out_dir / f"{state.cluster}-qos.sh", out_dir / f"{state.cluster}.cfg"
    _atomic_write(script, qos_script(state))
    _atomic_write(dump, render_dump(state))
    return [script, dump]
