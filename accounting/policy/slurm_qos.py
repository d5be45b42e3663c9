"""A QOS's GPU limits and what its running jobs use, as slurmctld holds them (issue #44.1): ``scontrol show
assoc_mgr flags=qos qos=…`` prints each QOS's ``GrpTRES=…,gres/gpu=2(2),gres/gpu:a100=2(2),…`` — the limit
(``N``: none) and, in brackets, what its jobs hold now. Pure: the text in, per QOS its GPU figures out, and
one line in Slurm's own terms for an answer."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

QOS_LINE = re.compile(r"^QOS=(\S+?)\(\d+\)\s*$")
GRP_TRES = re.compile(r"^\s+GrpTRES=(\S*)\s*$")
ITEM = re.compile(r"^(gres/gpu(?::[\w.-]+)?)=(N|\d+)\((\d+)\)$")


@dataclass(frozen=True)
class QosGpus:
    name: str
    gpus: Mapping[str, tuple[int | None, int]]
    """TRES (``gres/gpu``, ``gres/gpu:a100``) → (its GrpTRES limit, None when unlimited; GPUs its jobs hold)."""


def parse_assoc_mgr_qos(text: str) -> dict[str, QosGpus]:
    """Each QOS of the output with its GPU TRES; a QOS with no ``GrpTRES`` line has none."""
    found: dict[str, dict[str, tuple[int | None, int]]] = {}
    current: str | None = None
    for line in text.splitlines():
        head = QOS_LINE.match(line)
        if head:
            current = head.group(1)
            found[current] = {}
            continue
        grp = GRP_TRES.match(line)
        if grp and current is not None:
            for item in grp.group(1).split(","):
                tres = ITEM.match(item)
                if tres:
                    limit = None if tres.group(2) == "N" else int(tres.group(2))
                    found[current][tres.group(1)] = (limit, int(tres.group(3)))
    return {name: QosGpus(name, gpus) for name, gpus in found.items()}


def qos_said(usage: Mapping[str, QosGpus], names: list[str], gpu_type: str | None) -> str:
    """``Slurm: QOS guar-nlp 2 of 2, burst-nlp 0 of 1 GPUs held`` — the typed TRES of the job's GPU type where
    it has a limit, else the untyped one; '' when none of ``names`` is known."""
    parts = []
    for name in names:
        qos = usage.get(name)
        if qos is None:
            continue
        typed = qos.gpus.get(f"gres/gpu:{gpu_type}") if gpu_type else None
        limit, used = typed if typed and typed[0] is not None else qos.gpus.get("gres/gpu", (None, 0))
        parts.append(f"{name} {used} of {limit if limit is not None else 'unlimited'}")
    if not parts:
        return ""
    return "Slurm: QOS " + ", ".join(parts) + " GPUs held"
