"""Reads for accounting: usage rolled up the way a request asks, in SQL."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncMonth, TruncWeek

from accounting.models import Allocation, Finding, UsageHour, UsageSample, WorkloadRecord
from accounting.policy.showback import FlavorPeriod, SharedCost, Showback, UnitUsage, children_sums, roll_up, showback
from quotas.models import OrgUnit, Quota, ResourceFlavor
from quotas.selectors import subtree

GROUPS = {
    "unit": ("unit_path", F("unit__path")),
    "flavor": ("flavor_key", F("flavor__name")),
    "cluster": ("cluster", F("flavor__cluster__name")),
    "day": ("period", TruncDay("hour")),
    "month": ("period", TruncMonth("hour")),
}
MEASURES = ("guarantee", "allocated", "within", "borrowed", "lent", "pending", "active", "productive")


def usage_hours(
    *,
    within: str = "",
    flavor: str = "",
    cluster: str = "",
    start: datetime | None = None,
    end: datetime | None = None,
) -> QuerySet[UsageHour]:
    rows = UsageHour.objects.all()
    if within:
        rows = rows.filter(subtree("unit__path", within))
    if flavor:
        rows = rows.filter(flavor__name=flavor.rsplit("/", 1)[-1])
        if "/" in flavor:
            rows = rows.filter(flavor__cluster__name=flavor.split("/", 1)[0])
    if cluster:
        rows = rows.filter(flavor__cluster__name=cluster)
    if start:
        rows = rows.filter(hour__gte=start)
    if end:
        rows = rows.filter(hour__lt=end)
    return rows


def usage_summary(
    rows: QuerySet[UsageHour], group_by: list[str], *, start: datetime | None = None, end: datetime | None = None
) -> list[dict[str, Any]]:
    """Device-hours per group (one SQL aggregate). Active and productive are null where no source
    measured them, never zero. With a window, each group says how much of it had telemetry: its
    unit-flavor pairs × the window's minutes (clipped to the day or month) is what was expected,
    ``gap_minutes`` what was missing — a gap is never counted as idle."""
    keys = {GROUPS[g][0]: GROUPS[g][1] for g in group_by}
    totals = {f"{m}_h": Sum(m) for m in MEASURES}
    found = (
        rows.annotate(**keys)
        .values(*keys)
        .annotate(
            **totals,
            telemetry_minutes=Sum("minutes"),
            full_minutes=Sum("minutes_full"),
            pairs=Count(F("unit_id") * 1_000_003 + F("flavor_id"), distinct=True),
            productive_estimated_hours=Count("id", filter=Q(productive_estimated=True)),
        )
    )
    period = "day" if "day" in group_by else "month" if "month" in group_by else ""
    out = []
    for row in found.order_by(*keys) if keys else ([found.get()] if rows.exists() else []):
        for measure in MEASURES:
            value = row[f"{measure}_h"]
            row[f"{measure}_h"] = round(value, 3) if value is not None else None
        full = row.pop("full_minutes") or 0
        row["full_share"] = round(full / row["telemetry_minutes"], 4) if row["telemetry_minutes"] else None
        _coverage(row, start, end, period)
        out.append(row)
    if period and out:
        out = _with_gaps(out, list(keys), period, start, end)
    return out


def _coverage(row: dict[str, Any], start: datetime | None, end: datetime | None, period: str) -> None:
    expected = _expected_minutes(row, start, end, period)
    row["expected_minutes"] = expected
    row["gap_minutes"] = max(0, expected - row["telemetry_minutes"]) if expected is not None else None
    row["coverage"] = round(row["telemetry_minutes"] / expected, 4) if expected else None


def _with_gaps(
    rows: list[dict[str, Any]], keys: list[str], period: str, start: datetime | None, end: datetime | None
) -> list[dict[str, Any]]:
    """Grouped by day or month, a period without any telemetry is a row of its own (measures null,
    coverage 0, its gap counted), never a missing line: from ``start`` (or the first period seen) to
    ``end`` (or the last), for every group of the other keys."""
    others = [k for k in keys if k != "period"]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for each in rows:
        groups.setdefault(tuple(each[k] for k in others), []).append(each)
    out = []
    for group, seen in groups.items():
        have = {r["period"]: r for r in seen}
        first = _period_start(start, period) if start else min(have)
        last = max(have) if end is None else end
        moment = first
        while moment < last or (end is None and moment == last):
            row: dict[str, Any] | None = have.get(moment)
            if row is None:
                row = {**dict(zip(others, group, strict=True)), "period": moment, "telemetry_minutes": 0,
                       "pairs": max(r["pairs"] for r in seen), "productive_estimated_hours": 0, "full_share": None,
                       **{f"{m}_h": None for m in MEASURES}}  # fmt: skip
                _coverage(row, start, end, period)
            out.append(row)
            moment = _next(moment, period)
    return sorted(out, key=lambda r: tuple(r[k] for k in keys))


def _expected_minutes(row: dict[str, Any], start: datetime | None, end: datetime | None, period: str) -> int | None:
    """Minutes of telemetry the row should have: its pairs × the window's minutes — clipped to its day
    or month when grouped by one (a whole day or month when no window was given)."""
    if not period and (start is None or end is None):
        return None
    if period:
        first = row["period"]
        following = first + timedelta(days=1) if period == "day" else (first + timedelta(days=32)).replace(day=1)
        lo, hi = max(start or first, first), min(end or following, following)
    else:
        assert start is not None and end is not None
        lo, hi = start, end
    return max(0, int((hi - lo).total_seconds() // 60)) * int(row["pairs"])


PERIODS = {"day": (TruncDay, 31), "week": (TruncWeek, 26), "month": (TruncMonth, 12)}
"""Chart periods: how hours are bucketed, and how many buckets a chart shows."""


def _next(start: datetime, period: str) -> datetime:
    if period == "day":
        return start + timedelta(days=1)
    if period == "week":
        return start + timedelta(weeks=1)
    return (start + timedelta(days=32)).replace(day=1)


def unit_usage_days(path: str, *, period: str = "day") -> list[Any]:
    """Per period (day, week or month), over the last periods that have usage for ``path`` and
    everything below: what its units' own workloads held within their guarantees, borrowed, lent and
    queued, and measured as active (device-hours; each unit's rows count only its own workloads, so
    the subtree adds up), and how many hours had telemetry (a period with none is a gap). Active is
    None where no hour of the period was measured. The guarantee is left to the caller. Two queries."""
    from accounting.charts import Day

    trunc, count = PERIODS[period]
    rows = usage_hours(within=path)
    last = rows.aggregate(last=Max("hour"))["last"]
    if last is None:
        return []
    first = rows.filter(hour__lte=last).annotate(p=trunc("hour")).order_by("-p").values_list("p", flat=True)[:1]
    starts = [first[0]]
    for _ in range(count - 1):
        previous = (starts[-1] - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        starts.append(_period_start(previous, period))
    starts.reverse()
    found = {
        r["p"]: r
        for r in rows.filter(hour__gte=starts[0], hour__lt=_next(starts[-1], period))
        .annotate(p=trunc("hour"))
        .values("p")
        .annotate(
            guaranteed=Sum("minutes", filter=Q(guarantee__gt=0)),  # before "minutes" names the sum
            minutes=Sum("minutes"),
            pairs=Count(F("unit_id") * 1_000_003 + F("flavor_id"), distinct=True),
            within=Sum("within"),
            borrowed=Sum("borrowed"),
            lent=Sum("lent"),
            pending=Sum("pending"),
            active=Sum("active"),
            full=Sum("minutes_full"),
        )
    }
    out = []
    for begins in starts:
        row = found.get(begins)
        if not row:
            out.append(Day(begins.date(), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, None))
            continue
        hours = row["minutes"] / 60 / row["pairs"]
        out.append(
            Day(begins.date(), hours, 0.0, row["within"], row["borrowed"], row["lent"], row["pending"], row["active"],
                int(row["full"] or 0), int(row["guaranteed"] or 0))
        )  # fmt: skip
    return out


def _period_start(moment: datetime, period: str) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    return day


def latest_usage() -> list[dict[str, Any]]:
    """Each unit × flavor's latest rolled-up hour (one query): what Prometheus scrapes."""
    last = UsageHour.objects.aggregate(last=Max("hour"))["last"]
    if last is None:
        return []
    return [
        dict(row)
        for row in UsageHour.objects.filter(hour=last, minutes__gt=0).values(
            "unit__path", "flavor__name", "flavor__cluster__name", "minutes", "guarantee", "allocated", "borrowed",
            "lent", "pending", "active", "hour",
        )
    ]  # fmt: skip


@dataclass(frozen=True)
class ShowbackPeriod:
    start: datetime
    end: datetime
    label: str

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


def showback_period(month: str = "", day: str = "") -> ShowbackPeriod:
    """``month=2020-05`` or ``day=2020-05-03`` (UTC); ValueError naming the field and the form."""
    try:
        if day:
            start = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
            if not 1970 <= start.year <= 2999:
                raise ValueError("out of range")
            return ShowbackPeriod(start, start + timedelta(days=1), day)
        start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    except ValueError as exc:
        field_name, form = ("day", "YYYY-MM-DD") if day else ("month", "YYYY-MM")
        raise ValueError(f"{field_name}: {day or month!r} is not {form}") from exc
    if not 1970 <= start.year <= 2999:  # 0000-01 and 9999-12 parse, then overflow the period's end
        raise ValueError(f"month: {month!r} is outside 1970-01 … 2999-12")
    return ShowbackPeriod(start, (start + timedelta(days=32)).replace(day=1), month)


@dataclass(frozen=True)
class UnitFlavorUsage:
    """Every unit × flavor of some hourly rows, summed in one query, with what the callers ask of it
    (showback, the detectors, the review): the units and flavors named, today's GPU quotas, and each
    unit's own guarantee-hours (its children's taken out)."""

    totals: dict[tuple[int, int], dict[str, Any]]
    units: dict[int, OrgUnit]
    flavors: dict[int, ResourceFlavor]
    quotas: dict[tuple[int, int], Quota]

    def own_guarantee_h(self, unit: int, flavor: int) -> float:
        return max(0.0, (self.totals[(unit, flavor)]["g"] or 0) - self._children_h.get((unit, flavor), 0.0))

    def children_guarantee(self, unit: int, flavor: int) -> int:
        return self._children_q.get((unit, flavor), 0)

    @cached_property
    def _children_h(self) -> dict[tuple[int, int], float]:
        parents = {uid: u.parent_id for uid, u in self.units.items()}
        return children_sums({k: r["g"] or 0.0 for k, r in self.totals.items()}, parents)

    @cached_property
    def _children_q(self) -> dict[tuple[int, int], int]:
        """Today's guarantees of every active child, with usage or not (one query, when asked)."""
        rows = (
            Quota.objects.filter(resource="nvidia.com/gpu", flavor__in=self.flavors, unit__parent__in=self.units)
            .filter(unit__archived_at__isnull=True)
            .values("unit__parent_id", "flavor_id")
            .annotate(g=Sum("guarantee"))
        )
        return {(r["unit__parent_id"] or 0, r["flavor_id"]): int(r["g"] or 0) for r in rows}


def unit_flavor_usage(rows: QuerySet[UsageHour], *, with_units: Iterable[int] = ()) -> UnitFlavorUsage:
    """Sums per unit × flavor of ``rows`` (one query) and the units (plus ``with_units``), flavors and
    GPU quotas they name (three more)."""
    totals: dict[tuple[int, int], dict[str, Any]] = {
        (r["unit_id"], r["flavor_id"]): dict(r)
        for r in rows.values("unit_id", "flavor_id").annotate(
            g=Sum("guarantee"), a=Sum("allocated"), w=Sum("within"), b=Sum("borrowed"), lent_h=Sum("lent"),
            p=Sum("pending"), act=Sum("active"), prod=Sum("productive"),
            full=Sum("minutes_full"), mins=Sum("minutes"),
            est=Count("id", filter=Q(productive_estimated=True)),
            hours=Count("id", filter=Q(minutes__gt=0)),
            above=Count("id", filter=Q(minutes__gt=0) & Q(guarantee__lt=F("allocated") + F("pending"))),
        )
    }  # fmt: skip
    ids = {u for u, _ in totals} | set(with_units)
    units = {
        u.pk: u for u in OrgUnit.objects.filter(pk__in=ids).only("id", "path", "parent_id", "depth", "archived_at")
    }
    flavors = {f.pk: f for f in ResourceFlavor.objects.select_related("cluster").filter(pk__in={f for _, f in totals})}
    quotas = {
        (q.unit_id, q.flavor_id): q
        for q in Quota.objects.filter(resource="nvidia.com/gpu", flavor__in=flavors, unit__in=units)
    }
    return UnitFlavorUsage(totals, units, flavors, quotas)


def shared_cost_rule(within: str) -> SharedCost:
    """The organisation's rule for shared cost (ALLOT_SHOWBACK_SHARED_COST: ``org=rule`` pairs, and a
    bare rule as the default)."""
    organisation = within.split("/", 1)[0]
    rules: dict[str, str] = {str(org): str(rule) for org, rule in settings.ALLOT_SHOWBACK_SHARED_COST}
    return SharedCost(rules.get(organisation) or rules.get("") or SharedCost.NOT_SHARED)


def showback_for(period: ShowbackPeriod, *, rule: SharedCost) -> tuple[Showback, dict[int, dict[str, Any]]]:
    """The fleet's showback for a period, over every flavor with telemetry in it (four aggregate
    queries, whatever the number of units), and the units and flavors it names (id → fields,
    archived units included: their history stays)."""
    rows = UsageHour.objects.filter(hour__gte=period.start, hour__lt=period.end)
    found = unit_flavor_usage(rows, with_units=_ancestors(rows.values("unit_id")))
    units: dict[int, dict[str, Any]] = {
        uid: {"id": uid, "parent_id": u.parent_id, "path": u.path, "depth": u.depth, "archived_at": u.archived_at}
        for uid, u in found.units.items()
    }
    usage = [
        UnitUsage(unit, flavor, found.own_guarantee_h(unit, flavor), r["w"], r["b"], r["lent_h"])
        for (unit, flavor), r in found.totals.items()
    ]
    covered: dict[int, float] = {}
    for flavor, minutes in rows.values("flavor_id", "hour").annotate(m=Max("minutes")).values_list("flavor_id", "m"):
        covered[flavor] = covered.get(flavor, 0.0) + minutes / 60
    flavors: dict[int, dict[str, Any]] = {
        f["id"]: dict(f)
        for f in ResourceFlavor.objects.filter(id__in=covered)
        .annotate(reserved=Sum("reservations__devices"))
        .values(
            "id", "name", "cluster__name", "physical_devices", "headroom_devices", "price_per_device_hour", "reserved"
        )
    }
    periods = {
        fid: FlavorPeriod(
            fid,
            f["price_per_device_hour"] or None,
            f["physical_devices"],
            period.hours,
            min(covered[fid], period.hours),
            f["reserved"] or 0,
            f["headroom_devices"],
        )
        for fid, f in flavors.items()
    }
    names: dict[int, dict[str, Any]] = {**units, **{-fid: f for fid, f in flavors.items()}}
    return showback(usage, periods, rule), names


def _ancestors(unit_ids: QuerySet[Any]) -> set[int]:
    """Every ancestor of the units ``unit_ids`` selects (by path prefix, two queries)."""
    paths = OrgUnit.objects.filter(id__in=unit_ids).values_list("path", flat=True)
    prefixes = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    return set(OrgUnit.objects.filter(path__in=prefixes).values_list("id", flat=True))


FLAVOR_PARTS = (
    "fleet", "capacity", "no_telemetry", "used", "idle", "lent", "borrowed", "reserved", "headroom", "free", "shared",
)  # fmt: skip


def _money(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def showback_report(period: ShowbackPeriod, *, within: str = "", rollup: bool = True) -> dict[str, Any]:
    """Showback for a period, as the API and the page give it: per unit × flavor (each unit with its
    subtree when ``rollup``), restricted to ``within`` and below; per flavor the fleet's parts and
    cost, which the lines and the shared line add up to; problems found in the data."""
    rule = shared_cost_rule(within)
    result, names = showback_for(period, rule=rule)
    parent_of = {uid: u["parent_id"] for uid, u in names.items() if uid > 0}
    lines = list(roll_up(result.lines, parent_of).values()) if rollup else result.lines
    out = []
    for line in sorted(lines, key=lambda x: (names[x.unit]["path"], names[-x.flavor]["name"])):
        unit, flavor = names[line.unit], names[-line.flavor]
        if within and not (unit["path"] == within or unit["path"].startswith(f"{within}/")):
            continue
        out.append(
            {
                "unit_path": unit["path"],
                "depth": unit["depth"],
                "archived": unit["archived_at"] is not None,
                "flavor_key": f"{flavor['cluster__name']}/{flavor['name']}",
                "guarantee_h": round(line.guarantee, 3),
                "used_h": round(line.used, 3),
                "idle_h": round(line.idle, 3),
                "lent_h": round(line.lent, 3),
                "borrowed_h": round(line.borrowed, 3),
                "shared_h": round(line.shared, 3),
                "charged_h": round(line.charged, 3),
                "cost": _money(line.cost),
                "idle_cost": _money(line.idle_cost),
                "lent_credit": _money(line.lent_credit),
            }
        )
    flavors = []
    for fid, t in sorted(result.flavors.items(), key=lambda kv: names[-kv[0]]["name"]):
        f = names[-fid]
        flavors.append(
            {
                "flavor_key": f"{f['cluster__name']}/{f['name']}",
                "price_per_device_hour": None
                if f["price_per_device_hour"] in (None, 0)
                else str(f["price_per_device_hour"]),
                **{f"{k}_h": round(getattr(t, k), 3) for k in FLAVOR_PARTS},
                "fleet_cost": _money(t.fleet_cost),
                "unshared_cost": _money(t.unshared_cost),
            }
        )
    return {
        "period": {"label": period.label, "start": period.start, "end": period.end, "hours": period.hours},
        "within": within,
        "rule": rule.value,
        "lines": out,
        "flavors": flavors,
        "problems": result.problems,
    }


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
    for rid, unit, flavor, devices, submitted, job in pending.order_by("submitted_at").values_list(
        "id", "unit_id", "flavor_id", "devices", "submitted_at", "job_id"
    ):
        if unit in oldest or submitted is None:
            continue
        ceiling = ceilings.get((unit, keys.get(flavor or 0, ""), Resource.GPU), 0)
        if devices <= ceiling or flavor is None:
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


def visible_findings(user: Any) -> QuerySet[Finding]:
    """The findings ``user`` may read: all of them, or under ALLOT_SHOWBACK_VISIBILITY=leads those of
    the units they lead and below (platform admins: all). For the API and the inbox alike."""
    from quotas.access import is_platform_admin, led_paths

    rows = Finding.objects.select_related("unit", "flavor__cluster", "change_request")
    if settings.ALLOT_SHOWBACK_VISIBILITY == "leads" and not is_platform_admin(user):
        match = Q(pk__in=[])
        for path in led_paths(user):
            match |= subtree("unit__path", path)
        rows = rows.filter(match)
    return rows


def telemetry_hours(start: datetime, end: datetime, flavors: Iterable[int] | None = None) -> dict[int, int]:
    """Hours of [start, end) with telemetry (any rollup row) per flavor (of ``flavors`` when given): one
    GROUP BY flavor, hour — cheaper than COUNT(DISTINCT hour). A gap is missing data, never idle."""
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    if flavors is not None:
        rows = rows.filter(flavor_id__in=list(flavors))
    found: dict[int, int] = defaultdict(int)
    for flavor_id, _hour, _n in rows.values_list("flavor_id", "hour").annotate(n=Count("id")):
        found[flavor_id] += 1
    return dict(found)


def usage_months() -> list[str]:
    """Months with usage, newest first (YYYY-MM): what the showback and fairness pages offer."""
    months = UsageHour.objects.annotate(m=TruncMonth("hour")).values_list("m", flat=True).distinct().order_by("-m")
    return [m.strftime("%Y-%m") for m in months]


def readable_reviews(user: Any) -> Any:
    """The reviews whose costs ``user`` may read (the same rule as showback)."""
    from accounting.models import Review
    from quotas.access import cost_readable_paths, within_any

    paths = cost_readable_paths(user)
    return Review.objects.all() if paths is None else Review.objects.filter(within_any("unit__path", paths))
