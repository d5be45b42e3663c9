"""Fairness reads: each unit's share against its weight and guarantee, and stranded capacity (idle
guaranteed devices while others queued)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, F, Q

from accounting.models import HELD, Allocation, UsageHour, UsageSample, WorkloadRecord
from accounting.selectors.showback import ShowbackPeriod
from quotas.models import OrgUnit
from quotas.selectors import subtree

STRANDED = """
SELECT COUNT(*), SUM(CASE WHEN need IS NOT NULL AND spare >= need THEN 1 ELSE 0 END),
       SUM(CASE WHEN need IS NOT NULL THEN 1 ELSE 0 END), SUM(CASE WHEN need IS NOT NULL THEN stranded ELSE 0 END)
FROM (
  SELECT at,
         MIN(CASE WHEN queued > 0 THEN queued END) AS need,
         MAX(CASE WHEN queued = 0 AND guarantee > held THEN guarantee - held END) AS spare,
         SUM(CASE WHEN queued = 0 AND guarantee > held THEN guarantee - held ELSE 0 END) AS stranded
  FROM accounting_usagesample
  WHERE flavor_id = %s AND at >= %s AND at < %s
  GROUP BY at
) per_minute
"""


@dataclass(frozen=True)
class Stranded:
    """Queuing beside idle guarantees on one flavor, minute by minute (the minute samples)."""

    minutes: int
    """Minutes with telemetry."""
    coexist: int
    """Minutes in which some unit queued while another, not queuing, had at least that many idle
    guaranteed devices."""
    queuing: int
    """Minutes in which some unit queued."""
    mean_stranded: float
    """Idle guaranteed devices of the units not queuing, on average over the minutes with queuing."""

    @property
    def share(self) -> float:
        return self.coexist / self.minutes if self.minutes else 0.0


def stranded(flavor_id: int, start: datetime, end: datetime) -> Stranded | None:
    """One aggregate query over the flavor's minute samples; None where there are none."""
    from django.db import connection

    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(STRANDED, [flavor_id, adapt(start), adapt(end)])
        minutes, coexist, queuing, total = cursor.fetchone()
    if not minutes:
        return None
    return Stranded(int(minutes), int(coexist or 0), int(queuing or 0), float(total or 0) / queuing if queuing else 0.0)


def fairness_report(period: ShowbackPeriod, *, within: str = "", now: datetime | None = None) -> dict[str, Any]:
    """Outcome fairness per unit (and per tier) for a period: waits and slowdowns of the workloads
    admitted in it, the oldest feasible workload still pending, preemptions suffered and caused,
    and the guarantee delivered (minute samples where there are, else hours). A handful of queries."""
    from accounting.policy.fairness import Outcome, by_unit_and_tier, delivered_share
    from accounting.reclaims import reclaims
    from quotas.policy.capacity import effective_ceilings
    from quotas.policy.quantity import Resource
    from quotas.selectors import flavor_keys, org_snapshot

    now = now or datetime.now(tz=UTC)
    start, end = period.start, period.end
    records = WorkloadRecord.objects.filter(admitted_at__gte=start, admitted_at__lt=end, unit__isnull=False)
    pending = WorkloadRecord.objects.filter(state="pending", unit__isnull=False, submitted_at__lt=end)
    samples = UsageSample.objects.filter(at__gte=start, at__lt=end)
    hours = UsageHour.objects.filter(hour__gte=start, hour__lt=end, minutes__gt=0)
    if within:
        records, pending = records.filter(subtree("unit__path", within)), pending.filter(subtree("unit__path", within))
        samples, hours = samples.filter(subtree("unit__path", within)), hours.filter(subtree("unit__path", within))
    outcomes = []
    for unit, tier, submitted, admitted, held, ended in records.values_list(
        "unit_id", "tier", "submitted_at", "admitted_at", "held_seconds", "ended_at"
    ):
        if admitted is None or unit is None:
            continue
        run = held or ((ended or now) - admitted).total_seconds()
        outcomes.append(Outcome(unit, tier, (admitted - (submitted or admitted)).total_seconds(), run))
    summaries = by_unit_and_tier(outcomes)
    snapshot = org_snapshot()
    ceilings = effective_ceilings(snapshot)
    keys = flavor_keys()
    oldest: dict[int, dict[str, Any]] = {}
    for rid, unit, flavor, held, submitted, job in (
        pending.order_by("submitted_at")
        .annotate(held=HELD)
        .values_list("id", "unit_id", "flavor_id", "held", "submitted_at", "job_id")
    ):
        if unit in oldest or submitted is None:
            continue
        ceiling = ceilings.get((unit, keys.get(flavor or 0, ""), Resource.GPU), 0)
        if held <= ceiling or flavor is None:
            oldest[unit] = {"record": rid, "job": job, "waiting_s": int((now - submitted).total_seconds())}
    suffered = dict(
        Allocation.objects.filter(end__gte=start, end__lt=end, unit__isnull=False)
        .filter(Q(raw_state__startswith="PREEMPTED") | Q(raw_state__startswith="evicted Preempted"))
        .values("unit_id").annotate(n=Count("id")).values_list("unit_id", "n")
    )  # fmt: skip
    caused: dict[int, int] = {}
    for reclaim in reclaims(start, end, {}):
        caused[reclaim.lender] = caused.get(reclaim.lender, 0) + 1
    demand = Q(guarantee__gt=0) & Q(guarantee__lte=F("held") + F("queued"))
    delivered: dict[int, tuple[int, int, str]] = {
        r["unit_id"]: (r["d"], r["g"], "minutes")
        for r in samples.values("unit_id").annotate(
            d=Count("id", filter=demand), g=Count("id", filter=demand & Q(guarantee__lte=F("held")))
        )
    }
    hourly = Q(guarantee__gt=0) & Q(guarantee__lte=F("allocated") + F("pending"))
    for r in (
        hours.exclude(unit_id__in=delivered)
        .values("unit_id")
        .annotate(d=Count("id", filter=hourly), g=Count("id", filter=hourly & Q(guarantee__lte=F("within") + 1e-6)))
    ):
        delivered[r["unit_id"]] = (r["d"], r["g"], "hours")
    # Why it held less than its guarantee while work waited (DESIGN, "a starting point for the split"):
    # devices of its guarantee were lent to others (a reclaim was due: the contract's promise is what to
    # check), or nothing was lent and the queued work did not fit its free devices (packing)
    short = Q(guarantee__gt=0, pending__gt=0) & Q(allocated__lt=F("guarantee") - 1e-6)
    split = {
        r["unit_id"]: (r["while_lent"], r["no_fit"])
        for r in hours.values("unit_id").annotate(
            while_lent=Count("id", filter=short & Q(lent__gt=1e-6)),
            no_fit=Count("id", filter=short & Q(lent__lte=1e-6)),
        )
    }
    jobs = records.exists() or pending.exists()
    units = {u for u, _ in summaries} | set(oldest) | set(suffered) | set(caused) | set(delivered)
    names = {u["id"]: u for u in OrgUnit.objects.filter(id__in=units).values("id", "path", "depth", "parent__path")}
    rows = []
    for uid in sorted(units, key=lambda u: names[u]["path"]):
        summary = summaries.get((uid, ""))
        d = delivered.get(uid)
        rows.append(
            {
                "unit_path": names[uid]["path"],
                "parent_path": names[uid]["parent__path"],
                "depth": names[uid]["depth"],
                "workloads": summary.workloads if summary else 0,
                "wait_p50_s": summary.wait_p50_s if summary else None,
                "wait_p95_s": summary.wait_p95_s if summary else None,
                "slowdown_p50": round(summary.slowdown_p50, 3) if summary else None,
                "slowdown_p95": round(summary.slowdown_p95, 3) if summary else None,
                "tiers": {
                    tier: {
                        "workloads": s.workloads,
                        "wait_p95_s": s.wait_p95_s,
                        "slowdown_p95": round(s.slowdown_p95, 3),
                    }
                    for (u, tier), s in sorted(summaries.items())
                    if u == uid and tier
                },
                "oldest_pending": oldest.get(uid),
                "preemptions_suffered": suffered.get(uid, 0),
                "preemptions_caused": caused.get(uid, 0),
                "held_guarantee_when_wanted": round(share, 4)
                if d and (share := delivered_share(d[0], d[1])) is not None
                else None,
                "wanted_guarantee": {"count": d[0], "unit": d[2]} if d else None,
                "waited_while_lent_hours": split.get(uid, (0, 0))[0] if uid in split else None,
                "did_not_fit_hours": split.get(uid, (0, 0))[1] if uid in split else None,
            }
        )
    return {
        "period": {"label": period.label, "start": start, "end": end, "hours": period.hours},
        "within": within,
        "job_records": jobs,
        "units": rows,
    }
