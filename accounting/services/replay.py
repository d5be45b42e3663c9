"""The replay source: per-unit minute series from a file (accounting/policy/replay.py), for backtesting
and the demo. Loading the same file twice changes nothing; a corrected row replaces the earlier one."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from accounting.models import SourceKind, SourceRun, SourceStatus
from accounting.policy.replay import parse_replay
from accounting.policy.sacct import LineProblem
from accounting.services.usage_version import usage_changed
from quotas.models import Cluster, OrgUnit, Quota, ResourceFlavor
from quotas.policy.quantity import Resource

BATCH = 10_000
KEEP_PROBLEMS = 100


@dataclass
class _Span:
    """A unit's first and last minute on a flavor and how many minutes had a row."""

    first: datetime
    last: datetime
    rows: int = 1

    @property
    def gap_minutes(self) -> int:
        return int((self.last - self.first).total_seconds() // 60) + 1 - self.rows


@transaction.atomic
def usage_replay_load(
    *,
    lines: Iterable[str],
    cluster: Cluster,
    units: Mapping[str, OrgUnit],
    name: str,
    now: datetime | None = None,
    progress: Callable[[int], None] | None = None,
) -> SourceRun:
    """Load replay rows for ``cluster``: each row's ``unit`` key is looked up in ``units`` and its
    ``flavor`` among the cluster's flavors; rows for neither are counted and skipped, bad lines kept
    on the run. Minutes missing between a unit's first and last row are counted as gap minutes.
    ``progress`` is told the rows loaded so far after each batch."""
    now = now or timezone.now()
    run = SourceRun.objects.create(source=SourceKind.REPLAY, cluster=cluster, name=name, started_at=timezone.now())
    flavors = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster)}
    lendable = {
        (unit_id, flavor_id): value
        for unit_id, flavor_id, value in Quota.objects.filter(
            flavor__cluster=cluster, resource=Resource.GPU
        ).values_list("unit_id", "flavor_id", "lendable")
    }
    counts = {"rows": 0, "unknown_unit": 0, "unknown_flavor": 0, "problems": 0}
    problems: list[dict[str, object]] = []
    unknown: set[str] = set()
    spans: dict[tuple[int, int], _Span] = {}
    batch: list[tuple[Any, ...]] = []
    adapted: dict[datetime, Any] = {}
    unit_ids = {key: u.pk for key, u in units.items()}
    flavor_ids = {name: f.pk for name, f in flavors.items()}
    if connection.vendor == "sqlite":  # the index pages of a month's load stay in memory (64 MiB)
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA cache_size = -65536")
    for item in parse_replay(lines, now=now):
        if isinstance(item, LineProblem):
            counts["problems"] += 1
            if len(problems) < KEEP_PROBLEMS:
                problems.append({"line": item.line, "text": item.text, "error": item.error})
            continue
        unit, flavor = unit_ids.get(item.unit), flavor_ids.get(item.flavor)
        if unit is None:
            counts["unknown_unit"] += 1
            unknown.add(item.unit)
            continue
        if flavor is None:
            counts["unknown_flavor"] += 1
            continue
        counts["rows"] += 1
        key = (unit, flavor)
        _span(spans, key, item.at)
        at = adapted.get(item.at)
        if at is None:
            at = adapted[item.at] = connection.ops.adapt_datetimefield_value(item.at)
        lend = min(lendable.get(key, 0), item.quota)
        batch.append((unit, flavor, at, item.quota, lend, item.held, item.queued, run.pk))
        if len(batch) >= BATCH:
            _flush(batch)
            if len(adapted) > 200_000:  # a month of minutes is 44,640: kept across batches
                adapted.clear()
            if progress:
                progress(counts["rows"])
    _flush(batch)
    run.counts = {
        **counts,
        "gap_minutes": sum(s.gap_minutes for s in spans.values()),
        "units": len({u for u, _ in spans}),
    }
    run.problems = problems
    if unknown:
        run.message = "unit keys that map to no unit: " + ", ".join(sorted(unknown)[:20])
    run.status = SourceStatus.PARTIAL if counts["problems"] or unknown else SourceStatus.OK
    if spans:
        run.watermark = max(s.last for s in spans.values())
        run.window_start = min(s.first for s in spans.values())
        run.window_end = run.watermark + timedelta(minutes=1)
    run.finished_at = timezone.now()
    run.save()
    return run


def _span(spans: dict[tuple[int, int], _Span], key: tuple[int, int], at: datetime) -> None:
    span = spans.get(key)
    if span is None:
        spans[key] = _Span(at, at)
    else:
        span.first, span.last, span.rows = min(span.first, at), max(span.last, at), span.rows + 1


# One statement per batch, rows as tuples (no model instances: building 700,000 of them and Django's
# upsert of each batch took 70 of the demo month's 76 s on SQLite). A corrected row replaces the earlier.
UPSERT = (
    "INSERT INTO accounting_usagesample (unit_id, flavor_id, at, guarantee, lendable, held, queued, source_run_id) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (unit_id, flavor_id, at) DO UPDATE SET "
    "guarantee = excluded.guarantee, lendable = excluded.lendable, held = excluded.held, queued = excluded.queued, "
    "source_run_id = excluded.source_run_id"
)


def _flush(batch: list[tuple[Any, ...]]) -> None:
    if not batch:
        return
    usage_changed()
    if connection.vendor == "sqlite":  # the driver's own executemany: Django's wrapper doubled the time
        connection.ensure_connection()
        connection.connection.cursor().executemany(UPSERT.replace("%s", "?"), batch)
    else:
        with connection.cursor() as cursor:
            cursor.executemany(UPSERT, batch)
    batch.clear()
