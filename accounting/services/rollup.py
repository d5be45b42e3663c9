"""Hourly rollups per unit × flavor, rebuilt in SQL for any window (idempotent: the window's rows are
deleted and written again in one transaction).

From minute samples (the replay source): per minute, within = min(held, guarantee), borrowed = the
rest, lent = the unit's share of what borrowers took beyond unguaranteed capacity, in proportion to
its idle lendable guarantee — the rule of ``accounting.policy.attribution``, which the tests hold this
SQL to. ``minutes`` counts minutes with telemetry: an hour without any is a gap, not an idle hour.

From allocations (PostgreSQL; Slurm jobs and Kueue Workloads alike): device-seconds of each run
clipped to each hour, its borrowed part as the source fixed it (a burst QOS in Slurm; beyond the
guarantee at admission in Kueue); guarantee-hours from the unit's guarantee on that flavor for every
hour a successful ingest of that cluster covered.

Productive device-hours are measured where workloads report progress (``PROGRESS``; the signal is
documented in ``accounting.policy.dcgm``) and otherwise an estimate, flagged
``productive_estimated``: allocated minus the work evictions lost (see ``ALLOCATIONS``). Active is the measured
activity DCGM reported for the hour (``ACTIVITY``), empty (null) where no telemetry measured it.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounting import partitions
from accounting.models import UsageHour
from accounting.services.rollup_allocations import allocation_rows, cadences, covered_until
from accounting.services.usage_version import usage_changed

COLUMNS = (
    "unit_id, flavor_id, hour, minutes, guarantee, allocated, within, borrowed, lent, pending, "
    "active, productive, productive_estimated, minutes_full, minutes_queued"
)

SAMPLES = """
INSERT INTO {table} ({columns})
SELECT unit_id, flavor_id, hour, COUNT(*), SUM(g) / 60.0, SUM(a) / 60.0, SUM(w) / 60.0, SUM(b) / 60.0,
       SUM(lent) / 60.0, SUM(q) / 60.0, NULL, SUM(a) / 60.0, %(true)s, SUM(full_), SUM(queued_)
FROM (
  SELECT x.*,
         CASE WHEN tb - unguaranteed > 0 AND offered > 0
              THEN (CASE WHEN tb - unguaranteed < offered THEN tb - unguaranteed ELSE offered END)
                   * offer * 1.0 / offered
              ELSE 0 END AS lent
  FROM (
    SELECT y.*,
           SUM(b) OVER w AS tb,
           SUM(offer) OVER w AS offered,
           CASE WHEN physical > SUM(g) OVER w THEN physical - SUM(g) OVER w ELSE 0 END AS unguaranteed
    FROM (
      SELECT s.unit_id, s.flavor_id, s.at, {hour} AS hour, f.physical_devices AS physical,
             s.guarantee AS g, s.held AS a, s.queued AS q,
             CASE WHEN s.held < s.guarantee THEN s.held ELSE s.guarantee END AS w,
             CASE WHEN s.held > s.guarantee THEN s.held - s.guarantee ELSE 0 END AS b,
             CASE WHEN s.guarantee - (CASE WHEN s.held < s.guarantee THEN s.held ELSE s.guarantee END) < s.lendable
                  THEN s.guarantee - (CASE WHEN s.held < s.guarantee THEN s.held ELSE s.guarantee END)
                  ELSE s.lendable END AS offer,
             CASE WHEN s.guarantee > 0 AND s.held * 10 >= s.guarantee * 9 THEN 1 ELSE 0 END AS full_,
             CASE WHEN s.queued > 0 THEN 1 ELSE 0 END AS queued_
      FROM accounting_usagesample s JOIN quotas_resourceflavor f ON f.id = s.flavor_id
      WHERE s.at >= %(start)s AND s.at < %(end)s
    ) y
    WINDOW w AS (PARTITION BY flavor_id, at)
  ) x
) z
WHERE TRUE
GROUP BY unit_id, flavor_id, hour
ON CONFLICT (unit_id, flavor_id, hour) DO UPDATE SET
  minutes = EXCLUDED.minutes,
  guarantee = {table}.guarantee + EXCLUDED.guarantee,
  allocated = {table}.allocated + EXCLUDED.allocated,
  within = {table}.within + EXCLUDED.within,
  borrowed = {table}.borrowed + EXCLUDED.borrowed,
  lent = EXCLUDED.lent,
  pending = EXCLUDED.pending,
  productive = COALESCE({table}.productive, 0) + EXCLUDED.productive,
  productive_estimated = EXCLUDED.productive_estimated,
  minutes_full = EXCLUDED.minutes_full,
  minutes_queued = EXCLUDED.minutes_queued
"""

# PostgreSQL, one statement, the first to write the (emptied) window: guarantee-hours for every hour a
# successful ingest of the flavor's cluster covered (Slurm's sacct, Kueue's list and watch; the last
# hour only for the minutes it covered) joined with the allocations clipped to each hour
# (device-seconds per run and hour). One row per unit × flavor × hour, so a plain INSERT: no conflict
# to probe for (samples, written next, add to these rows).
#
# Productive device-hours, an estimate labelled as such until a workload reports progress: allocated
# minus the work lost to evictions — each run that ended preempted or requeued loses what it did since
# its last checkpoint, at most the checkpoint cadence of its unit's contract (the whole run when the
# contract sets none), counted in the last hour it held its devices. Slurm says PREEMPTED or REQUEUED;
# a Kueue run an eviction ended is written 'evicted <reason>'. Durations are date_part (a double):
# EXTRACT returns numeric, whose sums over millions of run-hours cost twice the time and memory.
# On a shared flavor a run holds its GPU-equivalents (slices by weight), its borrowed slices in proportion.
ALLOCATIONS = """
WITH allocated AS (
  SELECT unit_id, flavor_id, h,
         SUM(devices * secs) / 3600.0 AS allocated, SUM((devices - borrowed) * secs) / 3600.0 AS within,
         SUM(borrowed * secs) / 3600.0 AS borrowed, SUM(lost) / 3600.0 AS lost
  FROM (
    SELECT a.unit_id, a.flavor_id, a.held AS devices,
           CASE WHEN a.equivalents IS NULL THEN a.borrowed ELSE a.borrowed * a.equivalents / NULLIF(a.devices, 0) END
             AS borrowed, h,
           date_part('epoch', LEAST(COALESCE(a."end", %(now)s), h + interval '1 hour') - GREATEST(a.start, h)) AS secs,
           CASE WHEN h = a.last_hour THEN a.lost ELSE 0 END AS lost
    FROM (
      SELECT a.*, COALESCE(a.equivalents, a.devices) AS held,
             date_trunc('hour', a."end" - interval '1 microsecond') AS last_hour,
             CASE WHEN a.raw_state LIKE 'PREEMPTED%%' OR a.raw_state LIKE 'REQUEUE%%' OR a.raw_state LIKE 'evicted %%'
                  THEN COALESCE(a.equivalents, a.devices) * LEAST(date_part('epoch', a."end" - a.start), {cadence})
                  ELSE 0 END AS lost
      FROM accounting_allocation a
      WHERE a.unit_id IS NOT NULL AND a.flavor_id IS NOT NULL {shard_a}
        AND a.start < %(end)s AND COALESCE(a."end", %(now)s) > %(start)s
    ) a
    CROSS JOIN LATERAL generate_series(date_trunc('hour', GREATEST(a.start, %(start)s)),
                                       LEAST(COALESCE(a."end", %(now)s), %(end)s) - interval '1 microsecond',
                                       interval '1 hour') AS h
  ) runs
  GROUP BY unit_id, flavor_id, h
), covered AS (
  SELECT * FROM unnest(%(clusters)s::bigint[], %(covers)s::timestamptz[]) AS c(cluster_id, upto)
), guaranteed AS (
  SELECT q.unit_id, q.flavor_id, h,
         LEAST(60, FLOOR(date_part('epoch', c.upto - h) / 60))::int AS m, q.guarantee
  FROM quotas_quota q
  JOIN quotas_resourceflavor f ON f.id = q.flavor_id
  JOIN covered c ON c.cluster_id = f.cluster_id
  CROSS JOIN LATERAL generate_series(date_trunc('hour', %(start)s::timestamptz),
                                     c.upto - interval '1 microsecond', interval '1 hour') AS h
  WHERE q.resource = 'nvidia.com/gpu' AND q.guarantee > 0 {shard_q}
)
INSERT INTO {table} ({columns})
SELECT COALESCE(g.unit_id, a.unit_id), COALESCE(g.flavor_id, a.flavor_id), COALESCE(g.h, a.h),
       COALESCE(g.m, 60), COALESCE(g.guarantee * g.m / 60.0, 0), COALESCE(a.allocated, 0), COALESCE(a.within, 0),
       COALESCE(a.borrowed, 0), 0, 0, NULL, GREATEST(0, COALESCE(a.allocated, 0) - COALESCE(a.lost, 0)), TRUE, 0, 0
FROM guaranteed g FULL OUTER JOIN allocated a ON a.unit_id = g.unit_id AND a.flavor_id = g.flavor_id AND a.h = g.h
"""


# Measured activity (DCGM): the units' active device-hours, summed over clusters, into the hour's row
# (written above, or new: a pod can be busy on a flavor without an allocation Allot saw).
ACTIVITY = """
INSERT INTO {table} ({columns})
SELECT unit_id, flavor_id, hour, 0, 0, 0, 0, 0, 0, 0, SUM(active), NULL, %(false)s, 0, 0
FROM accounting_activityhour
WHERE hour >= %(start)s AND hour < %(end)s
GROUP BY unit_id, flavor_id, hour
ON CONFLICT (unit_id, flavor_id, hour) DO UPDATE SET active = EXCLUDED.active
"""


# Measured productive work (workloads that report progress): the reporting share of the hour is
# measured, the rest keeps its estimate in proportion; flagged as estimated while any part is.
PROGRESS = """
UPDATE {table} SET
  productive = m.productive + CASE WHEN {table}.allocated > m.reporting
      THEN COALESCE({table}.productive, 0) * (1 - m.reporting / {table}.allocated)
      ELSE 0 END,
  productive_estimated = CASE WHEN {table}.allocated > m.reporting * 1.001 THEN %(true)s ELSE %(false)s END
FROM (
  SELECT unit_id, flavor_id, hour, SUM(productive) AS productive, SUM(reporting) AS reporting
  FROM accounting_activityhour
  WHERE hour >= %(start)s AND hour < %(end)s AND productive IS NOT NULL
  GROUP BY unit_id, flavor_id, hour
) m
WHERE {table}.unit_id = m.unit_id AND {table}.flavor_id = m.flavor_id
  AND {table}.hour = m.hour
"""


def _cadence_sql() -> str:
    """Each unit's checkpoint cadence (seconds) from its effective contract, as a SQL CASE over the
    unit id (one snapshot; units whose contract sets none lose the whole run)."""
    cadence = cadences()
    if not cadence:
        return "1e18"
    whens = " ".join(f"WHEN {uid} THEN {int(seconds)}" for uid, seconds in sorted(cadence.items()))
    return f"(CASE a.unit_id {whens} ELSE 1e18 END)"


# Memory for the month's hash aggregate and join (three million rows), and for building its indexes:
# with PostgreSQL's defaults (4 MB, 64 MB) both spill to disk. No JIT: compiling costs more than it
# saves on statements that run once.
SETTINGS = ("SET LOCAL work_mem = '256MB'", "SET LOCAL maintenance_work_mem = '256MB'")


ROLLUP_LOCK = 0x616C6C6F74  # one rollup at a time (pg_advisory_lock): a month's swap replaces what others wrote


def usage_rollup(*, start: datetime, end: datetime, now: datetime | None = None) -> int:
    """Rebuild the hourly rollups of [start, end) (whole hours). Returns the rows written.

    On PostgreSQL each month of the window is done apart: a whole month is built as a new table and
    swapped in for its partition (``accounting.partitions``), part of a month is deleted and written
    again in place, in one transaction: readers see the old rows until it commits. Called outside a
    transaction, a whole month's bulk is first written by ``ALLOT_USAGE_ROLLUP_WORKERS`` connections side
    by side (each a share of the units) into a table no reader sees until the swap."""
    now = now or timezone.now()
    start = start.replace(minute=0, second=0, microsecond=0)
    usage_changed()
    if connection.vendor != "postgresql":
        with transaction.atomic():
            UsageHour.objects.filter(hour__gte=start, hour__lt=end).delete()
            with connection.cursor() as cursor:
                _build(cursor, partitions.PARENT, start, end, now)
        return UsageHour.objects.filter(hour__gte=start, hour__lt=end).count()
    months = partitions.months_of(start, end - timedelta(microseconds=1)) if start < end else []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [ROLLUP_LOCK])
        try:
            partitioned = partitions.is_partitioned(cursor)
            whole = [m for m in months if partitioned and start <= m and partitions.next_month(m) <= end]
            workers = settings.ALLOT_USAGE_ROLLUP_WORKERS
            prebuilt = set()
            if whole and workers > 1 and not connection.in_atomic_block:
                for month in whole:
                    _prebuild(cursor, month, now, workers)
                    prebuilt.add(month)
            try:
                with transaction.atomic():
                    _rollup(cursor, months, whole, prebuilt, start, end, now, partitioned=partitioned)
            except BaseException:
                for month in prebuilt:
                    cursor.execute(f"DROP TABLE IF EXISTS {_built(month)}")
                raise
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ROLLUP_LOCK])
    usage_changed()
    return UsageHour.objects.filter(hour__gte=start, hour__lt=end).count()


def _built(month: datetime) -> str:
    return f"{partitions.month_table(month)}_new"


def _rollup(
    cursor: Any,
    months: list[datetime],
    whole: list[datetime],
    prebuilt: set[datetime],
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    partitioned: bool,
) -> None:
    for setting in SETTINGS:
        cursor.execute(setting)
    for month in months:
        if month in whole:
            built = _built(month)
            if month not in prebuilt:
                partitions.new_table(cursor, built)
            following = partitions.next_month(month)
            fresh = month not in prebuilt  # (the workers wrote and indexed a prebuilt one)
            _build(cursor, built, month, following, now, fresh=fresh, bulk=fresh)
            partitions.swap_month(cursor, built, month)
            continue
        first, last = max(start, month), min(end, partitions.next_month(month))
        if partitioned:
            partitions.ensure_month(cursor, month)
        cursor.execute(f"DELETE FROM {partitions.PARENT} WHERE hour >= %s AND hour < %s", [first, last])
        _build(cursor, partitions.PARENT, first, last, now)


def _prebuild(cursor: Any, month: datetime, now: datetime, workers: int) -> None:
    """``month``'s allocations and guarantees written into a new, unattached table by ``workers``
    connections at once (each its own transaction, a share of the units: unit id modulo workers), then
    its indexes built side by side likewise."""
    built = _built(month)
    partitions.new_table(cursor, built)  # autocommit: the workers' connections see it
    statement = ALLOCATIONS.format(table=built, columns=COLUMNS, cadence=_cadence_sql(), shard_a="{a}", shard_q="{q}")
    params = _allocation_params(month, partitions.next_month(month), now)
    shares = [
        statement.format(a=f"AND a.unit_id %% {workers} = {k}", q=f"AND q.unit_id %% {workers} = {k}")
        for k in range(workers)
    ]
    try:
        _side_by_side([(sql, params) for sql in shares])
        _side_by_side([(sql, None) for sql in partitions.index_statements(built)])
        partitions.unique_constraint(cursor, built)
    except BaseException:
        cursor.execute(f"DROP TABLE IF EXISTS {built}")
        raise


def _side_by_side(statements: list[tuple[str, dict[str, Any] | None]]) -> None:
    """Run each statement on a connection of its own, at the same time, each in its own transaction;
    raise the first failure once all have ended."""
    failures: list[BaseException] = []

    def run(sql: str, params: dict[str, Any] | None) -> None:
        try:
            with transaction.atomic(), connection.cursor() as own:
                for setting in SETTINGS:
                    own.execute(setting)
                own.execute(sql, params)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=run, args=pair, name="allot-rollup") for pair in statements]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _allocation_params(start: datetime, end: datetime, now: datetime) -> dict[str, Any]:
    covered = {c: max(start, min(upto, end)) for c, upto in covered_until().items()}  # none past what was read
    return {"start": start, "end": end, "now": now, "clusters": list(covered), "covers": list(covered.values())}


def _build(
    cursor: Any, table: str, start: datetime, end: datetime, now: datetime, *, fresh: bool = False, bulk: bool = True
) -> None:
    """Write the rollups of [start, end) into ``table``, which holds none of them: allocations and
    guarantees first (PostgreSQL; a plain INSERT), then — for a ``fresh`` table, a new month — its indexes,
    built once over the bulk, then samples, activity and progress onto those rows."""
    adapt = connection.ops.adapt_datetimefield_value  # SQLite compares datetimes as text in its own format
    params: dict[str, Any] = {"start": adapt(start), "end": adapt(end), "now": adapt(now), "true": True, "false": False}
    postgres = connection.vendor == "postgresql"
    if postgres and bulk:  # (unless workers wrote it already)
        statement = ALLOCATIONS.format(table=table, columns=COLUMNS, cadence=_cadence_sql(), shard_a="", shard_q="")
        cursor.execute(statement, {**params, **_allocation_params(start, end, now)})
    elif bulk:  # SQLite (the embedded demo): the same rows, computed here at demo sizes
        UsageHour.objects.bulk_create(allocation_rows(start, end, now), batch_size=2000)
    if fresh:
        partitions.index_table(cursor, table)
    cursor.execute(SAMPLES.format(table=table, columns=COLUMNS, hour=_hour("s.at")), params)
    cursor.execute(ACTIVITY.format(table=table, columns=COLUMNS), params)
    cursor.execute(PROGRESS.format(table=table), params)


def _hour(column: str) -> str:
    if connection.vendor == "postgresql":
        return f"date_trunc('hour', {column})"
    return f"strftime('%%Y-%%m-%%d %%H:00:00', {column})"
