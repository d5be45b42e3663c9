"""What a whole-node (``--exclusive``) job is given, per partition, from slurmctld's own inventory.

Slurm allocates every generic resource of a node to a job that has the node to itself (``--exclusive``,
or any job in a partition with ``OverSubscribe=EXCLUSIVE``): a CPU-only exclusive job holds the node's
16 GPUs and counts them against its QOS limits, so under a QOS that lets a job hold fewer — a tier QOS
that carries none, a unit's 1-GPU QOS — it pends forever (``QOSMaxGRESPerJob`` / ``QOSGrpGRES``).
job_submit.lua cannot see nodes, so the snapshot carries, per partition, the GPUs per type of its
*smallest* node (each type's least count across the partition's nodes; a type some node lacks is
counted on none): an exclusive job is refused only when even that much is past what its account or
QOS allows, i.e. when it could start on no node of the partition.

Read from ``scontrol show node -o`` (``Partitions=``, ``CfgTRES=…,gres/gpu:a100=8``) and
``scontrol show partition -o`` (``Default=YES``, ``OverSubscribe=EXCLUSIVE``).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

TYPED = re.compile(r"gres/gpu:([A-Za-z][\w.-]*)=(\d+)")


def _records(text: str, key: str) -> list[dict[str, str]]:
    found = []
    for block in re.split(rf"(?={key}=)", text):  # one line a record with -o; without it, indented lines
        fields = dict(item.split("=", 1) for item in block.split() if "=" in item)
        if fields.get(key):
            found.append(fields)
    return found


def partition_gpus(nodes_text: str, partitions_text: str) -> dict[str, Any]:
    """``{"partitions": {name: {"node_gpus": {type: n}, "exclusive": bool}}, "default_partition": name}``."""
    smallest: dict[str, dict[str, int]] = {}
    for node in _records(nodes_text, "NodeName"):
        gpus = {t: int(n) for t, n in TYPED.findall(node.get("CfgTRES", ""))}
        for name in filter(None, node.get("Partitions", "").split(",")):
            if name not in smallest:
                smallest[name] = gpus
            else:
                seen = smallest[name]
                smallest[name] = {t: min(n, gpus.get(t, 0)) for t, n in seen.items() if min(n, gpus.get(t, 0)) > 0}
    partitions: dict[str, Any] = {}
    default = None
    for part in _records(partitions_text, "PartitionName"):
        name = part["PartitionName"]
        partitions[name] = {
            "node_gpus": dict(sorted(smallest.get(name, {}).items())),
            "exclusive": part.get("OverSubscribe", "").upper().startswith("EXCLUSIVE"),
        }
        if part.get("Default", "").upper() == "YES":
            default = name
    for name, gpus in smallest.items():  # a partition the node list names but the partition list lacks
        partitions.setdefault(name, {"node_gpus": dict(sorted(gpus.items())), "exclusive": False})
    return {"partitions": dict(sorted(partitions.items())), "default_partition": default}


def inventory_digest(inventory: dict[str, Any]) -> str:
    """Changes when the inventory does: job_submit.lua swaps its snapshot in when the version or this differ."""
    return hashlib.sha1(json.dumps(inventory, sort_keys=True).encode()).hexdigest()[:12]
