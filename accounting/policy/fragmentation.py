"""The fragmentation index (seed 8.12.1): free GPUs that cannot be allocated to what waits, because of
how they are spread over nodes.

Definitions (one flavor, one moment):

- a node's **free** GPUs: its allocatable GPUs minus those held by running work; a node down,
  drained or cordoned has none free (nothing can start there);
- the **pending shapes**: each waiting workload's GPUs per node and its number of nodes (a 64-GPU
  gang of 8 per node is 8 × 8; a 1-GPU job is 1 × 1);
- a pending workload **fits now** when its members can be placed: Σ over nodes ⌊free / per-node⌋ ≥
  its nodes (a gang starts whole or not at all);
- a node's **usable** free GPUs: the most of its free GPUs the per-node size of a pending workload
  *that fits now* can take — ``max over those sizes s of s × ⌊free / s⌋``; a gang that cannot start
  uses nothing, however many of its per-node slots some nodes have (with nothing pending, all of
  them: nothing is stranded);
- **fragmentation index** = 1 − Σ usable / Σ free (0 when nothing is free): the share of the free GPUs
  no waiting request can be allocated, given its per-node need and its node count — 0 means every
  free GPU could go to something that waits; 1 means none could;
- **largest placeable gang**, per per-node size of the waiting work: how many members of that size
  could start now (Σ ⌊free / size⌋), beside the gangs that wait for more;
- **largest free block**: the most free GPUs on one node; **whole free nodes**: nodes with every
  GPU free.

So "120 free GPUs while a 64-GPU gang waits for days" reads: free 120, largest block 6, the gang
does not fit, index 1.0. And 5 whole free nodes of 8 beside 30 nodes with one GPU free, with an
8 × 8 gang waiting: free 70, largest placeable gang 5 × 8, the gang does not fit, index 1.0 (counting
node by node alone, the 40 on whole nodes would look usable: 0.43).

Inventories come from ``scontrol show node -o`` (Slurm: ``CfgTRES`` against ``AllocTRES`` per GPU
type) and Kubernetes Nodes and their bound Pods (allocatable ``nvidia.com/gpu`` against the requests
of the pods bound to the node).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from accounting.policy.findings import FindingKind, Found, Thresholds

GPU = "nvidia.com/gpu"
UNAVAILABLE = ("DOWN", "DRAIN", "FAIL", "MAINT", "NOT_RESPONDING", "FUTURE", "POWERED_DOWN", "REBOOT")


@dataclass(frozen=True)
class NodeGpus:
    name: str
    flavor: str
    """The flavor's name on its cluster (Slurm: the GPU type)."""
    total: int
    used: int
    available: bool = True

    @property
    def free(self) -> int:
        return max(0, self.total - self.used) if self.available else 0


@dataclass(frozen=True)
class PendingShape:
    workload: str
    flavor: str | None
    """None: any flavor (a request without a GPU type)."""
    per_node: int
    nodes: int = 1

    @property
    def gpus(self) -> int:
        return self.per_node * self.nodes


@dataclass(frozen=True)
class Fragmentation:
    flavor: str
    nodes: int
    total: int
    used: int
    free: int
    usable: int
    largest_block: int
    whole_free_nodes: int
    pending_gpus: int
    waiting: tuple[str, ...] = ()
    """Pending workloads that do not fit now, largest first: "job 812: 8 × 8 GPUs"."""
    fitting: int = 0
    blocks: Mapping[int, int] = field(default_factory=dict)
    """Free GPUs per node → how many nodes have that many."""
    placeable: Mapping[int, int] = field(default_factory=dict)
    """Per-node size of the waiting work → how many members of that size could start now."""

    @property
    def index(self) -> float:
        return round(1 - self.usable / self.free, 3) if self.free else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor, "nodes": self.nodes, "total": self.total, "used": self.used, "free": self.free,
            "usable": self.usable, "index": self.index, "largest_block": self.largest_block,
            "whole_free_nodes": self.whole_free_nodes, "pending_gpus": self.pending_gpus,
            "waiting": list(self.waiting), "fitting": self.fitting,
            "blocks": {str(k): v for k, v in sorted(self.blocks.items())},
            "placeable": {str(k): v for k, v in sorted(self.placeable.items())},
        }  # fmt: skip


def fragmentation(flavor: str, nodes: Iterable[NodeGpus], pending: Iterable[PendingShape]) -> Fragmentation:
    """The index and its evidence for ``flavor`` (see the module docstring)."""
    mine = [n for n in nodes if n.flavor == flavor and n.total > 0]
    waiting = [p for p in pending if p.flavor in (flavor, None) and p.per_node > 0]
    free = [n.free for n in mine]
    placeable = {s: sum(f // s for f in free) for s in {p.per_node for p in waiting}}
    sizes = {p.per_node for p in waiting if placeable[p.per_node] >= p.nodes}
    # only what can start uses anything: a gang that cannot start strands every slot it sees
    usable = sum(max((s * (f // s) for s in sizes), default=0) for f in free) if waiting else sum(free)
    not_fitting, fitting = [], 0
    for p in sorted(waiting, key=lambda p: (-p.gpus, p.workload)):
        if placeable[p.per_node] >= p.nodes:
            fitting += 1
        else:
            not_fitting.append(
                f"{p.workload}: {p.nodes} × {p.per_node} GPUs" if p.nodes > 1 else f"{p.workload}: {p.per_node} GPUs"
            )
    blocks: dict[int, int] = defaultdict(int)
    for f in free:
        blocks[f] += 1
    return Fragmentation(
        flavor, len(mine), sum(n.total for n in mine), sum(min(n.used, n.total) for n in mine), sum(free), usable,
        max(free, default=0), sum(1 for n in mine if n.available and n.used == 0), sum(p.gpus for p in waiting),
        tuple(not_fitting), fitting, dict(blocks), placeable,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ Slurm

TYPED = re.compile(r"gres/gpu:([\w.-]+)=(\d+)")


def parse_scontrol_nodes(text: str) -> list[NodeGpus]:
    """``scontrol show node [-o]``: per node and GPU type, configured (``CfgTRES``) against allocated
    (``AllocTRES``) GPUs; a node whose State names DOWN, DRAIN, … has none available."""
    found = []
    for block in re.split(r"(?=NodeName=)", text):  # one line a node with -o; without it, indented lines
        fields = dict(item.split("=", 1) for item in block.split() if "=" in item)
        name = fields.get("NodeName")
        if not name:
            continue
        configured = {t: int(n) for t, n in TYPED.findall(fields.get("CfgTRES", ""))}
        allocated = {t: int(n) for t, n in TYPED.findall(fields.get("AllocTRES", ""))}
        state = fields.get("State", "").upper()
        available = not any(word in state for word in UNAVAILABLE)
        for gpu_type, total in sorted(configured.items()):
            found.append(NodeGpus(name, gpu_type, total, allocated.get(gpu_type, 0), available))
    return found


PER_NODE = re.compile(r"gres[:/]gpu(?::([A-Za-z][\w.-]*))?[:=](\d+)")


def parse_squeue_pending(text: str) -> list[PendingShape]:
    """``squeue -h -t PD -o "%i|%b|%D"``: each pending job's GPUs per node (``tres-per-node``, e.g.
    ``gres:gpu:a100:8``; an untyped ``gres:gpu:8`` fits any type) and its number of nodes. Jobs
    without a per-node GPU request (N/A) are left out."""
    found = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        match = PER_NODE.search(parts[1])
        if not match:
            continue
        try:
            nodes = max(1, int(parts[2]))
        except ValueError:
            nodes = 1
        found.append(PendingShape(f"job {parts[0]}", match.group(1), int(match.group(2)), nodes))
    return found


# ------------------------------------------------------------------------------------- Kubernetes


def _gpus(resources: Mapping[str, Any] | None) -> int:
    value = ((resources or {}).get("requests") or {}).get(GPU) or ((resources or {}).get("limits") or {}).get(GPU)
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def pod_gpus(pod: Mapping[str, Any]) -> int:
    spec = pod.get("spec") or {}
    containers = sum(_gpus(c.get("resources")) for c in spec.get("containers") or [])
    inits = max((_gpus(c.get("resources")) for c in spec.get("initContainers") or []), default=0)
    return max(containers, inits)


def node_flavor(labels: Mapping[str, str], flavors: Mapping[str, Mapping[str, str]]) -> str | None:
    """The flavor whose node labels all match (the most specific when several do)."""
    matching = [
        (len(want), name) for name, want in flavors.items() if want and all(labels.get(k) == v for k, v in want.items())
    ]
    return max(matching)[1] if matching else None


def kube_inventory(
    nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], flavors: Mapping[str, Mapping[str, str]]
) -> tuple[list[NodeGpus], list[PendingShape]]:
    """Nodes (allocatable GPUs, flavor by node labels; unschedulable or not Ready: none available)
    and pods (bound, not finished: their GPUs are used on their node; unbound and pending: a shape,
    grouped by owner as one gang)."""
    used: dict[str, int] = defaultdict(int)
    gangs: dict[str, list[int]] = defaultdict(list)
    flavor_of_gang: dict[str, str | None] = {}
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        gpus = pod_gpus(pod)
        if not gpus:
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            used[node] += gpus
            continue
        meta = pod.get("metadata") or {}
        owner: Mapping[str, Any] = next(iter(meta.get("ownerReferences") or []), {})
        key = f"{meta.get('namespace', '')}/{owner.get('name') or meta.get('name', '')}"
        gangs[key].append(gpus)
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        flavor_of_gang[key] = node_flavor(selector, flavors) if selector else None
    found = []
    for node in nodes:
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        flavor = node_flavor(meta.get("labels") or {}, flavors)
        total = int(str((status.get("allocatable") or {}).get(GPU, 0) or 0))
        if flavor is None or not total:
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        found.append(NodeGpus(meta.get("name", ""), flavor, total, used.get(meta.get("name", ""), 0),
                              ready and not spec.get("unschedulable")))  # fmt: skip
    shapes = [PendingShape(key, flavor_of_gang[key], max(sizes), len(sizes)) for key, sizes in sorted(gangs.items())]
    return found, shapes


@dataclass(frozen=True)
class Sampled:
    """One stored hourly sample (accounting.models.FragmentationSample)."""

    flavor: int
    flavor_key: str
    at: datetime
    free: int
    usable: int
    index: float
    largest_block: int
    pending_gpus: int
    waiting: tuple[str, ...] = ()


def _at(sample: Sampled) -> datetime:
    return sample.at


def fragmentation_findings(samples: Iterable[Sampled], th: Thresholds, start: datetime, end: datetime) -> list[Found]:
    """A flavor whose free GPUs mostly could not go to what waited (index above the threshold, work
    waiting) in at least ``fragmentation_hours`` of the window's samples."""
    by_flavor: dict[int, list[Sampled]] = defaultdict(list)
    for sample in samples:
        by_flavor[sample.flavor].append(sample)
    found = []
    for flavor, rows in sorted(by_flavor.items()):
        stuck = [r for r in rows if r.index > th.fragmentation_index_above and r.pending_gpus > 0 and r.free > 0]
        if len(stuck) < th.fragmentation_hours:
            continue
        last = max(stuck, key=lambda r: r.at)
        unusable = last.free - last.usable
        waiting = "; ".join(last.waiting[:3]) or f"{last.pending_gpus} GPUs of work"
        evidence = {
            "hours_stuck": len(stuck), "hours_sampled": len(rows), "free": last.free, "usable": last.usable,
            "largest_block": last.largest_block, "pending_gpus": last.pending_gpus, "waiting": list(last.waiting[:10]),
            "index": last.index,
            "hourly": [[r.at.isoformat(), r.free, r.usable, r.pending_gpus] for r in sorted(rows, key=_at)],
        }  # fmt: skip
        found.append(
            Found(
                FindingKind.FRAGMENTATION, f"fragmentation:{flavor}", None, flavor, start, end,
                f"{last.flavor_key}: {last.free} GPUs free, {unusable} of them unusable by what waits "
                f"({waiting}) — largest free block {last.largest_block}, in {len(stuck)} of {len(rows)} hours",
                evidence, None,
                "Free capacity spread too thin for the waiting shapes: pack small jobs onto fewer nodes (Slurm: "
                "SelectTypeParameters=CR_Pack_Nodes or a partition for small jobs; Kubernetes: a bin-packing "
                "scheduler profile), drain a few nodes to free whole ones for the gang, and keep backfill honest "
                "with runtime limits. Not more hardware: the GPUs are there.",
            )
        )  # fmt: skip
    return found
