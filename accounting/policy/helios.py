"""The Helios "Earth" per-VC minute series (Hu et al., SC '21; CC-BY-4.0) in the replay format.

Each VC's ``cluster_sequence_vc.csv`` gives, per minute, the VC's quota (``total_gpu_num``), GPUs held
by running jobs (``running_gpu_num``, capped at the quota by the authors) and GPUs asked for by
pending jobs (``pending_gpu_num``). Days listed in ``gaps`` are left out: the trace's 2020-05-10 reads
0 running and 0 pending all day (a telemetry gap, which the authors drop too), and a missing minute
is a gap to Allot, never an idle minute.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .replay import COLUMNS


def helios_to_replay(
    rows: Iterable[Mapping[str, str]], *, vc: str, flavor: str, gaps: frozenset[str] = frozenset()
) -> Iterator[str]:
    """Replay lines (no header) for one VC's rows."""
    for row in rows:
        day = row["time"][:10]
        if day in gaps:
            continue
        minute = row["time"][:16].replace(" ", "T")
        yield f"{minute},{vc},{flavor},{row['total_gpu_num']},{row['running_gpu_num']},{row['pending_gpu_num']}"


HEADER = ",".join(COLUMNS)
