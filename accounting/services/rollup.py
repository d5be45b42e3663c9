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
``productive_estimated``: allocated minus the work evictions lost (see ``LOST``). Active is the measured
activity DCGM reported for the hour (``ACTIVITY``), empty (null) where no telemetry measured it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from accounting.models import SourceKind, SourceRun, SourceStatus, UsageHour

COLUMNS = (
    "unit_id, flavor_id, hour, minutes, guarantee, allocated, within, borrowed, lent, pending, "
    "active, productive, productive_estimated, minutes_full, minutes_queued"
)

SAMPLES = """
INSERT INTO accounting_usagehour ({columns})
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
GROUP BY unit_id, flavor_id, hour
"""

# PostgreSQL, one statement: guarantee-hours for every hour a successful ingest of the flavor's cluster
# covered (Slurm's sacct, Kueue's list and watch; the last hour only for the minutes it covered)
# joined with the allocations clipped to each hour (device-seconds per run and hour). One row per
# unit × flavor × hour; added to a row the samples wrote.
ALLOCATIONS = """
WITH allocated AS (
  SELECT unit_id, flavor_id, h,
         SUM(devices * secs) / 3600.0 AS allocated, SUM((devices - borrowed) * secs) / 3600.0 AS within,
         SUM(borrowed * secs) / 3600.0 AS borrowed
  FROM (
    SELECT a.unit_id, a.flavor_id, a.devices, a.borrowed, h,
           EXTRACT(EPOCH FROM (LEAST(COALESCE(a."end", %(now)s), h + interval '1 hour') - GREATEST(a.start, h))) AS secs
    FROM accounting_allocation a
    CROSS JOIN LATERAL generate_series(date_trunc('hour', GREATEST(a.start, %(start)s)),
                                       LEAST(COALESCE(a."end", %(now)s), %(end)s) - interval '1 microsecond',
                                       interval '1 hour') AS h
    WHERE a.unit_id IS NOT NULL AND a.flavor_id IS NOT NULL
      AND a.start < %(end)s AND COALESCE(a."end", %(now)s) > %(start)s
  ) runs
  GROUP BY unit_id, flavor_id, h
), covered AS (
  SELECT * FROM unnest(%(clusters)s::bigint[], %(covers)s::timestamptz[]) AS c(cluster_id, upto)
), guaranteed AS (
  SELECT q.unit_id, q.flavor_id, h,
         LEAST(60, FLOOR(EXTRACT(EPOCH FROM (c.upto - h)) / 60))::int AS m, q.guarantee
  FROM quotas_quota q
  JOIN quotas_resourceflavor f ON f.id = q.flavor_id
  JOIN covered c ON c.cluster_id = f.cluster_id
  CROSS JOIN LATERAL generate_series(date_trunc('hour', %(start)s::timestamptz),
                                     c.upto - interval '1 microsecond', interval '1 hour') AS h
  WHERE q.resource = 'nvidia.com/gpu' AND q.guarantee > 0
)
INSERT INTO accounting_usagehour ({columns})
SELECT COALESCE(g.unit_id, a.unit_id), COALESCE(g.flavor_id, a.flavor_id), COALESCE(g.h, a.h),
       COALESCE(g.m, 60), COALESCE(g.guarantee * g.m / 60.0, 0), COALESCE(a.allocated, 0), COALESCE(a.within, 0),
       COALESCE(a.borrowed, 0), 0, 0, NULL, COALESCE(a.allocated, 0), TRUE, 0, 0
FROM guaranteed g FULL OUTER JOIN allocated a ON a.unit_id = g.unit_id AND a.flavor_id = g.flavor_id AND a.h = g.h
ON CONFLICT (unit_id, flavor_id, hour) DO UPDATE SET
  guarantee = accounting_usagehour.guarantee + EXCLUDED.guarantee,
  allocated = accounting_usagehour.allocated + EXCLUDED.allocated,
  within = accounting_usagehour.within + EXCLUDED.within,
  borrowed = accounting_usagehour.borrowed + EXCLUDED.borrowed,
  productive = accounting_usagehour.productive + EXCLUDED.productive
"""


# Productive device-hours, an estimate labelled as such until a workload reports progress: allocated
# (written with it above) minus the work lost to evictions — each run that ended preempted or
# requeued loses what it did since its last checkpoint, at most the checkpoint cadence of its unit's
# contract (the whole run when the contract sets none), counted in the hour it was evicted. Slurm says
# PREEMPTED or REQUEUED; a Kueue run an eviction ended is written 'evicted <reason>'.
LOST = """
UPDATE accounting_usagehour u
SET productive = GREATEST(0, u.productive - lost.device_hours)
FROM (
  SELECT a.unit_id, a.flavor_id, date_trunc('hour', a."end") AS h,
         SUM(a.devices * LEAST(EXTRACT(EPOCH FROM (a."end" - a.start)), {cadence})) / 3600.0 AS device_hours
  FROM accounting_allocation a
  WHERE (a.raw_state LIKE 'PREEMPTED%%' OR a.raw_state LIKE 'REQUEUE%%' OR a.raw_state LIKE 'evicted %%')
    AND a."end" >= %(start)s AND a."end" < %(end)s AND a.unit_id IS NOT NULL AND a.flavor_id IS NOT NULL
  GROUP BY 1, 2, 3
) lost
WHERE u.unit_id = lost.unit_id AND u.flavor_id = lost.flavor_id AND u.hour = lost.h AND u.productive_estimated
"""


# Measured activity (DCGM): the units' active device-hours, summed over clusters, into the hour's row
# (written above, or new: a pod can be busy on a flavor without an allocation Allot saw).
ACTIVITY = """
INSERT INTO accounting_usagehour ({columns})
SELECT unit_id, flavor_id, hour, 0, 0, 0, 0, 0, 0, 0, SUM(active), NULL, %(false)s, 0, 0
FROM accounting_activityhour
WHERE hour >= %(start)s AND hour < %(end)s
GROUP BY unit_id, flavor_id, hour
ON CONFLICT (unit_id, flavor_id, hour) DO UPDATE SET active = EXCLUDED.active
"""


# Measured productive work (workloads that report progress): the reporting share of the hour is
# measured, the rest keeps its estimate in proportion; flagged as estimated while any part is.
PROGRESS = """
UPDATE accounting_usagehour SET
  productive = m.productive + CASE WHEN accounting_usagehour.allocated > m.reporting
      THEN COALESCE(accounting_usagehour.productive, 0) * (1 - m.reporting / accounting_usagehour.allocated)
      ELSE 0 END,
  productive_estimated = CASE WHEN accounting_usagehour.allocated > m.reporting * 1.001 THEN %(true)s ELSE %(false)s END
FROM (
  SELECT unit_id, flavor_id, hour, SUM(productive) AS productive, SUM(reporting) AS reporting
  FROM accounting_activityhour
  WHERE hour >= %(start)s AND hour < %(end)s AND productive IS NOT NULL
  GROUP BY unit_id, flavor_id, hour
) m
WHERE accounting_usagehour.unit_id = m.unit_id AND accounting_usagehour.flavor_id = m.flavor_id
  AND accounting_usagehour.hour = m.hour
"""


def _cadence_sql() -> str:
    """Each unit's checkpoint cadence (seconds) from its effective contract, as a SQL CASE over the
    unit id (one snapshot; units whose contract sets none lose the whole run)."""
    from quotas.selectors import org_snapshot

    snapshot = org_snapshot()
    cadence = {}
    for uid in snapshot.units:
        contract = snapshot.effective_contract(uid)
        if contract and contract.checkpoint_every_s:
            cadence[uid] = int(contract.checkpoint_every_s)
    if not cadence:
        return "1e18"
    whens = " ".join(f"WHEN {uid} THEN {seconds}" for uid, seconds in sorted(cadence.items()))
    return f"(CASE a.unit_id {whens} ELSE 1e18 END)"


@transaction.atomic
def usage_rollup(*, start: datetime, end: datetime, now: datetime | None = None) -> int:
    """Rebuild the hourly rollups of [start, end) (whole hours). Returns the rows written."""
    now = now or timezone.now()
    start = start.replace(minute=0, second=0, microsecond=0)
    UsageHour.objects.filter(hour__gte=start, hour__lt=end).delete()
    adapt = connection.ops.adapt_datetimefield_value  # SQLite compares datetimes as text in its own format
    params: dict[str, Any] = {"start": adapt(start), "end": adapt(end), "now": adapt(now), "true": True}
    with connection.cursor() as cursor:
        cursor.execute(SAMPLES.format(columns=COLUMNS, hour=_hour("s.at")), params)
        if connection.vendor == "postgresql":
            covered = {c: max(start, min(upto, end)) for c, upto in _covered().items()}  # none past what was read
            clusters: dict[str, Any] = {"clusters": list(covered), "covers": list(covered.values())}
            cursor.execute(ALLOCATIONS.format(columns=COLUMNS), {**params, **clusters})
            cursor.execute(LOST.format(cadence=_cadence_sql()), params)
        cursor.execute(ACTIVITY.format(columns=COLUMNS), {**params, "false": False})
        cursor.execute(PROGRESS, {**params, "false": False})
    return UsageHour.objects.filter(hour__gte=start, hour__lt=end).count()


def _hour(column: str) -> str:
    if connection.vendor == "postgresql":
        return f"date_trunc('hour', {column})"
    return f"strftime('%%Y-%%m-%%d %%H:00:00', {column})"


def _covered() -> dict[int, datetime]:
    """Per cluster, up to when its successful Slurm or Kueue ingests have read (the latest watermark)."""
    runs = (
        SourceRun.objects.filter(source__in=[SourceKind.SLURM, SourceKind.KUEUE], watermark__isnull=False)
        .exclude(status=SourceStatus.FAILED)
        .values("cluster_id")
        .annotate(upto=Max("watermark"))
    )
    return {r["cluster_id"]: r["upto"] for r in runs if r["cluster_id"] is not None}
