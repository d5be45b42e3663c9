"""Accounting's state changes: ingest from each source, load replays, rebuild rollups."""

from accounting.services.dcgm import usage_ingest_dcgm
from accounting.services.ingest import usage_ingest_slurm
from accounting.services.kueue import usage_resync_kueue, usage_watch_kueue
from accounting.services.replay import usage_replay_load
from accounting.services.rollup import usage_rollup

__all__ = [
    "usage_ingest_dcgm",
    "usage_ingest_slurm",
    "usage_replay_load",
    "usage_resync_kueue",
    "usage_rollup",
    "usage_watch_kueue",
]
