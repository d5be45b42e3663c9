"""Showback reads: the period asked for, each unit's and flavor's usage and cost, the shared-cost rule."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.utils import timezone

from accounting.models import UsageHour
from accounting.policy.showback import FlavorPeriod, SharedCost, Showback, UnitUsage, children_sums, roll_up, showback
from quotas.history import prices_as_of
from quotas.models import OrgUnit, Quota, ResourceFlavor


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
            "id",
            "name",
            "cluster__name",
            "physical_devices",
            "headroom_devices",
            "price_per_device_hour",
            "reserved",
            "sharing",
        )
    }
    if period.end <= timezone.now():  # a closed month: the prices in force at its end, not today's
        then = prices_as_of(period.end, set(flavors))
        for fid, f in flavors.items():
            f["price_per_device_hour"] = then.get(fid)
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
                "hours_of": "GPU-equivalents" if f["sharing"] != "whole" else "devices",
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
