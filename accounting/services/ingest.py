"""Slurm usage through ``sacct``: every job allocation recorded once, resumable from a watermark.

Each run reads a window from the last successful watermark minus an overlap (a job that ended late,
or a record sacct corrected, is read again and replaces the earlier one) to now, streams sacct's
output, folds each job's runs into one ``WorkloadRecord`` with one ``Allocation`` per run, and
upserts them in batches. Ingesting the same window twice changes nothing. A line that cannot be
read is kept on the run with its number and the reason; a job whose account maps to no unit is
recorded with no unit and counted. If sacct fails, the run says why, nothing is written, and the
watermark stays where it was. The ``SourceRun`` row is the record of the ingest (who, when, what).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounting.models import SourceKind, SourceRun, SourceStatus, WorkloadRecord
from accounting.policy.sacct import (
    FIELDS,
    SACCT_FORMAT,
    LineProblem,
    SacctRun,
    parse_billing_weights,
    parse_sacct,
)
from accounting.services.sacct_records import Tally, batch_maps, write_batch
from quotas.integrations.slurm import Sacct, SlurmError
from quotas.models import Cluster, ClusterKind

log = logging.getLogger(__name__)

BATCH = 20_000


def slurm_cluster_name(cluster: Cluster) -> str:
    ref = cluster.connection_ref
    return ref.split(":", 1)[1] if ref.startswith("slurm:") else cluster.name


def usage_ingest_slurm(
    *,
    cluster: Cluster,
    now: datetime | None = None,
    lines: Iterable[str] | None = None,
    runner: Sacct | None = None,
) -> SourceRun:
    """Ingest ``cluster``'s jobs from sacct over [watermark − overlap, now) (see the module docstring).
    ``lines`` replaces running sacct (a file a site exported). Returns the recorded SourceRun; Slurm's
    failures are recorded in it, not raised."""
    if cluster.kind != ClusterKind.SLURM:
        raise ValueError(f"{cluster.name} is not a Slurm cluster")
    now = now or timezone.now()
    previous = (
        SourceRun.objects.filter(source=SourceKind.SLURM, cluster=cluster, watermark__isnull=False)
        .exclude(status=SourceStatus.FAILED)
        .order_by("-watermark")
        .first()
    )
    overlap = timedelta(seconds=settings.ALLOT_USAGE_SLURM_OVERLAP_SECONDS)
    if previous and previous.watermark:
        start = previous.watermark - overlap
    else:
        start = now - timedelta(seconds=settings.ALLOT_USAGE_SLURM_LOOKBACK_SECONDS)
    run = SourceRun(
        source=SourceKind.SLURM, cluster=cluster, started_at=timezone.now(), window_start=start, window_end=now
    )
    zone = ZoneInfo(settings.ALLOT_SLURM_TIMEZONE)
    weights: dict[str, dict[str, float]] = {}
    if lines is None:
        local = "%Y-%m-%dT%H:%M:%S"
        runner = runner or Sacct(binary=settings.ALLOT_SLURM_SACCT)
        read = getattr(runner, "billing_weights", None)
        for partition, text in (read(slurm_cluster_name(cluster)) if read else {}).items():
            try:
                weights[partition] = parse_billing_weights(text)
            except ValueError as exc:
                log.warning("cluster %s partition %s: %s; billed by sacct's figure", cluster.name, partition, exc)
        lines = runner.lines(
            slurm_cluster_name(cluster),
            start.astimezone(zone).strftime(local),
            now.astimezone(zone).strftime(local),
            SACCT_FORMAT,
        )
    tally = Tally()
    try:
        with transaction.atomic():
            run.save()
            maps = batch_maps(cluster)
            tally.history = WorkloadRecord.objects.filter(cluster=cluster).exists()
            parsed = parse_sacct(
                _counted(lines, tally), zone=zone, fields=FIELDS, cluster=cluster.name, weights=weights
            )
            for batch in _read_ahead(_batches(parsed, tally)):
                write_batch(run, cluster, maps, batch, tally)
            _finish(run, tally, now)
    except SlurmError as exc:
        run.pk = None
        run.status, run.message = SourceStatus.FAILED, str(exc)
        run.counts, run.finished_at = tally.counts, timezone.now()
        run.save()
    return run


_END = object()


def _read_ahead(batches: Iterator[list[SacctRun]], depth: int = 2) -> Iterator[list[SacctRun]]:
    """The batches, read and parsed on a thread up to ``depth`` ahead: the next batch is parsed while
    the database writes this one (the driver lets go of the GIL while it waits). What the reading
    raises (sacct failing) is raised here; if the consumer stops, the thread stops too."""
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer, which raises it
            put(exc)

    reader = threading.Thread(target=read, name="sacct-reader", daemon=True)
    reader.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        reader.join()


def _counted(lines: Iterable[str], tally: Tally) -> Iterator[str]:
    for line in lines:
        tally.counts["lines"] += 1
        yield line


def _batches(items: Iterable[SacctRun | LineProblem], tally: Tally) -> Iterator[list[SacctRun]]:
    """Runs in batches of BATCH lines; bad lines go to the tally."""
    batch: list[SacctRun] = []
    for item in items:
        if isinstance(item, LineProblem):
            tally.problem(item)
            continue
        batch.append(item)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


# After a bulk load the planner needs to know the new rows: autovacuum analyzes them only later, and a
# rollup planned on stale statistics sorts its month instead of hashing it (a third slower).
ANALYZE_AFTER = 50_000


def _finish(run: SourceRun, tally: Tally, now: datetime) -> None:
    if connection.vendor == "postgresql" and tally.counts.get("allocations", 0) >= ANALYZE_AFTER:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE accounting_workloadrecord, accounting_allocation")
    run.counts = {**tally.counts, "unresolved_accounts": len(tally.unresolved)}
    if tally.unresolved:
        run.message = "accounts that map to no unit: " + ", ".join(sorted(tally.unresolved)[:20])
    run.problems = tally.problems
    run.status = SourceStatus.PARTIAL if tally.counts["problems"] else SourceStatus.OK
    run.watermark = now
    run.finished_at = timezone.now()
    run.save()
