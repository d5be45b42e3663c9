"""The replay source: per-unit minute series from a file (accounting/policy/replay.py), for backtesting
and the demo. Loading the same file twice changes nothing; a corrected row replaces the earlier one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from accounting.models import SourceKind, SourceRun, SourceStatus, UsageSample
from accounting.policy.replay import ReplayRow, parse_replay
from accounting.policy.sacct import LineProblem
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
    *, lines: Iterable[str], cluster: Cluster, units: Mapping[str, OrgUnit], name: str, now: datetime | None = None
) -> SourceRun:
    """Load replay rows for ``cluster``: each row's ``unit`` key is looked up in ``units`` and its
    ``flavor`` among the cluster's flavors; rows for neither are counted and skipped, bad lines kept
    on the run. Minutes missing between a unit's first and last row are counted as gap minutes."""
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
    batch: list[UsageSample] = []
    for item in parse_replay(lines, now=now):
        if isinstance(item, LineProblem):
            counts["problems"] += 1
            if len(problems) < KEEP_PROBLEMS:
                problems.append({"line": item.line, "text": item.text, "error": item.error})
            continue
        sample = _sample(item, units, flavors, lendable, run, counts, unknown)
        if sample is None:
            continue
        _span(spans, sample)
        batch.append(sample)
        if len(batch) >= BATCH:
            _flush(batch)
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


def _sample(
    row: ReplayRow,
    units: Mapping[str, OrgUnit],
    flavors: Mapping[str, ResourceFlavor],
    lendable: Mapping[tuple[int, int], int],
    run: SourceRun,
    counts: dict[str, int],
    unknown: set[str],
) -> UsageSample | None:
    unit, flavor = units.get(row.unit), flavors.get(row.flavor)
    if unit is None:
        counts["unknown_unit"] += 1
        unknown.add(row.unit)
        return None
    if flavor is None:
        counts["unknown_flavor"] += 1
        return None
    counts["rows"] += 1
    return UsageSample(
        unit=unit,
        flavor=flavor,
        at=row.at,
        guarantee=row.quota,
        lendable=min(lendable.get((unit.pk, flavor.pk), 0), row.quota),
        held=row.held,
        queued=row.queued,
        source_run=run,
    )


def _span(spans: dict[tuple[int, int], _Span], sample: UsageSample) -> None:
    span = spans.get((sample.unit_id, sample.flavor_id))
    if span is None:
        spans[(sample.unit_id, sample.flavor_id)] = _Span(sample.at, sample.at)
    else:
        span.first, span.last, span.rows = min(span.first, sample.at), max(span.last, sample.at), span.rows + 1


def _flush(batch: list[UsageSample]) -> None:
    if batch:
        UsageSample.objects.bulk_create(
            batch,
            update_conflicts=True,
            unique_fields=["unit", "flavor", "at"],
            update_fields=["guarantee", "lendable", "held", "queued", "source_run"],
        )
        batch.clear()
