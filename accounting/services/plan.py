"""The governance plan of a unit's subtree for a month, its backtest, what-ifs, and accepting it.

``governance_plan`` reads the month's demand per leaf unit and flavor — minute samples where a replay
source wrote them, else the hourly rollups — runs the pure planner (``accounting.policy.planner``) on
today's tree, and replays the month through the backtest model (``accounting.policy.backtest``) under
the quotas in force then and under the plan. Findings, the monthly review, the portal and the API all
read this one result, so a unit gets one verdict per flavor and month. Results are cached in the
shared cache under a key made of what they are computed from (the tree and the usage version), so any
process may compute one and none serves a stale one.

``plan_accept`` turns the whole plan, or items feasible together, into one change request.
``backtest_what_if`` answers "what would last month have looked like with these numbers".
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db.models import Max
from django.utils import timezone

from accounting.models import UsageHour, UsageSample
from accounting.policy.backtest import (
    FlavorDemand,
    Reclaim,
    Terms,
    UnitOutcome,
    job_sizes,
    observed_allocated_h,
    simulate,
    totals,
)
from accounting.policy.plan_check import check_plan
from accounting.policy.plan_model import Plan, Settings, evidence
from accounting.policy.planner import make_plan
from accounting.selectors.demand_series import demand_rows
from accounting.selectors.showback import showback_period
from accounting.services.plan_records import in_force
from accounting.services.plan_report import SCENARIOS, PlanReport
from accounting.services.usage_version import usage_version
from quotas.history import org_snapshot_as_of
from quotas.models import OrgUnit
from quotas.policy.capacity import reclaimable
from quotas.policy.contracts import worst_case_reclaim_s
from quotas.policy.quantity import Resource
from quotas.policy.snapshot import OrgSnapshot, Quota
from quotas.selectors import flavor_keys, org_snapshot, subtree

GPU = Resource.GPU
CACHE_SECONDS = 3600
MODEL = "plan-7"
"""Part of the cache key: change it when the planner or the backtest model changes what they compute."""


def plan_settings() -> Settings:
    values = settings.ALLOT_PLAN
    return Settings(float(values["max_move_share"]), int(values["max_move_min"]), float(values["min_need_share"]))


def _within(snapshot: OrgSnapshot, path: str) -> set[int]:
    return {uid for uid, u in snapshot.units.items() if u.path == path or u.path.startswith(path + "/")}


def month_demand(
    snapshot: OrgSnapshot, path: str, start: datetime, end: datetime, *, minutes: bool = True
) -> tuple[list[FlavorDemand], dict[str, int]]:
    """Per flavor, the units of ``path`` with telemetry in [start, end) (a unit with units inside it
    only when it ran workloads of its own): minute samples where any
    exist for the flavor (unless ``minutes`` is False: a what-if while typing reads the 60× smaller
    hourly rollups), else the hourly rollups (held = allocated, queued = pending, per hour)."""
    keys = flavor_keys()
    leaves = sorted(_within(snapshot, path))
    steps_of: dict[str, int] = {}
    out = []
    samples = UsageSample.objects.filter(at__gte=start, at__lt=end, unit_id__in=leaves)
    sampled = set(samples.values_list("flavor_id", flat=True).distinct()) if minutes else set()
    hourly = UsageHour.objects.filter(hour__gte=start, hour__lt=end, unit_id__in=leaves, minutes__gt=0)
    flavors = sampled | set(hourly.values_list("flavor_id", flat=True).distinct())
    for fid in sorted(flavors):
        key = keys.get(fid)
        if key is None or key not in snapshot.flavors:
            continue
        step = 1 if fid in sampled else 60
        d = _series(snapshot, key, demand_rows(fid, leaves, start, end, sampled=fid in sampled), start, end, step)
        if d.units:
            out.append(d)
            steps_of[key] = d.step_minutes
    return out, steps_of


def _series(
    snapshot: OrgSnapshot, key: str, rows: np.ndarray, start: datetime, end: datetime, step: int
) -> FlavorDemand:
    n_steps = int((end - start).total_seconds() // (60 * step))
    rows = rows[(rows[:, 1] >= 0) & (rows[:, 1] < n_steps)]
    # a unit with units inside it and no workloads of its own (the rollups give it guarantee-hours
    # only) is not demand: its children's rows are
    busy = set(np.unique(rows[(rows[:, 2] > 0) | (rows[:, 3] > 0)][:, 0]).astype(int).tolist())
    idle_parents = [u for u in np.unique(rows[:, 0]).astype(int).tolist() if snapshot.children.get(u) and u not in busy]
    rows = rows[~np.isin(rows[:, 0], np.asarray(idle_parents, dtype=np.float64))] if rows.size else rows
    units = tuple(int(u) for u in np.unique(rows[:, 0]))
    row_of = np.searchsorted(np.asarray(units, dtype=np.float64), rows[:, 0])
    col = rows[:, 1].astype(np.int64)
    held = np.zeros((len(units), n_steps))
    queued = np.zeros((len(units), n_steps))
    present = np.zeros((len(units), n_steps), dtype=bool)
    held[row_of, col], queued[row_of, col], present[row_of, col] = rows[:, 2], rows[:, 3], True
    guarantee = np.zeros((len(units), n_steps))
    guarantee[row_of, col] = rows[:, 4]
    observed = {}
    for i, u in enumerate(units):
        now = snapshot.quota(u, key, GPU)
        seen = np.flatnonzero(present[i])  # the guarantee of its last step with telemetry
        g = round(float(guarantee[i, seen[-1]])) if seen.size else now.guarantee
        observed[u] = Terms(g, now.burst, now.lendable)
    return FlavorDemand(
        key, units, step, held, queued, present, observed, _pool(snapshot, key), _reclaims(snapshot, key, units),
        snapshot.flavors[key].lends_idle_guarantees,
    )  # fmt: skip


def _pool(snapshot: OrgSnapshot, key: str) -> int:
    limit = reclaimable(snapshot, key, GPU) or 0
    promised = sum(snapshot.quota(r, key, GPU).guarantee for r in snapshot.roots())
    return max(0, limit - promised)


def _reclaims(snapshot: OrgSnapshot, key: str, units: Sequence[int]) -> dict[int, Reclaim]:
    """Each unit's promise against the slowest borrower of the flavor (what getting devices back takes)."""
    slowest = 0
    for (uid, flavor, resource), q in snapshot.quotas.items():
        if flavor == key and resource is GPU and q.burst > 0 and uid in snapshot.units:
            contract = snapshot.effective_contract(uid)
            slowest = max(slowest, worst_case_reclaim_s(contract, snapshot.scheduling_pass_s) if contract else 0)
    out = {}
    for uid in units:
        contract = snapshot.effective_contract(uid) if uid in snapshot.units else None
        if contract is not None:
            out[uid] = Reclaim(slowest, contract.reclaim_within_s)
    return out


def _cache_key(snapshot: OrgSnapshot, path: str, start: datetime, end: datetime) -> str:
    """What the plan is computed from: the tree as it is (quotas, contracts, capacity) and the usage
    (its version, ``accounting.services.usage_version``: no scan of the rows), besides the model and its
    settings."""
    tree = repr((sorted(snapshot.quotas.items()), sorted(snapshot.units.items()), sorted(snapshot.flavors.items()),
                 sorted(snapshot.contracts.items()), snapshot.reservations))  # fmt: skip
    usage = usage_version()
    parts = (MODEL, path, start.isoformat(), end.isoformat(), usage, sorted(settings.ALLOT_PLAN.items()), tree)
    return "allot:plan:" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:32]


def governance_plan(unit: OrgUnit, month: str) -> PlanReport:
    """The plan of ``unit``'s organisation for ``month`` (YYYY-MM, UTC), seen from ``unit``: one plan
    per organisation, so a department's review, a team's finding and the API give one verdict.
    ValueError on a bad month."""
    period = showback_period(month)
    root = unit.path.split("/", 1)[0]
    return plan_for(root, period.start, period.end, month, as_of=_closed(period.end)).seen(unit.path)


def _closed(end: datetime) -> datetime | None:
    """A period that has ended is planned on the terms in force at its end (``quotas.history``): a
    change approved later never rewrites its plan or backtest. An open period: today's terms."""
    return end if end <= timezone.now() else None


def plan_for(path: str, start: datetime, end: datetime, label: str, *, as_of: datetime | None = None) -> PlanReport:
    """The plan and backtest of the organisation at ``path`` from the demand of [start, end): every
    flavor's units in one replay (borrowing crosses departments), on the quotas in force at ``as_of``
    (default: today's). Cached in the shared cache until policy or usage changes (any process reads
    what another computed)."""
    snapshot = org_snapshot_as_of(as_of)
    key = _cache_key(snapshot, path, start, end)
    found = cache.get(key)
    if isinstance(found, PlanReport):
        return replace(found, month=label)
    demands, steps = month_demand(snapshot, path, start, end)
    lends_idle = {k: f.lends_idle_guarantees for k, f in snapshot.flavors.items()}
    found = [e for d in demands for e in evidence(d)]
    plan = make_plan(snapshot, found, lends_idle=lends_idle, settings=plan_settings())
    report = _report(path, label, snapshot, demands, steps, plan)
    cache.set(key, report, CACHE_SECONDS)
    return report


def _report(
    path: str, label: str, snapshot: OrgSnapshot, demands: list[FlavorDemand], steps: dict[str, int], plan: Plan
) -> PlanReport:
    terms = plan.terms()
    today: dict[tuple[int, str], UnitOutcome] = {}
    planned: dict[tuple[int, str], UnitOutcome] = {}
    observed: dict[tuple[int, str], float] = {}
    for d in demands:
        base = simulate(d, {})
        after = simulate(d, {u: t for (u, f), t in terms.items() if f == d.flavor})
        real = observed_allocated_h(d)
        for u in d.units:
            today[(u, d.flavor)], planned[(u, d.flavor)] = base[u], after[u]
            observed[(u, d.flavor)] = real[u]
    paths = {uid: snapshot.path(uid) for uid, _ in today}
    scenarios = {}
    for name in SCENARIOS:
        before_s: dict[tuple[int, str], UnitOutcome] = {}
        after_s: dict[tuple[int, str], UnitOutcome] = {}
        for d in demands:
            as_if = (
                replace(d, job_size=job_sizes(d))
                if name == "whole_jobs"
                else replace(d, lends_idle=name == "every_idle_guarantee")
            )
            base = simulate(as_if, {})
            after = simulate(as_if, {u: t for (u, f), t in terms.items() if f == d.flavor})
            for u in d.units:
                before_s[(u, d.flavor)], after_s[(u, d.flavor)] = base[u], after[u]
        scenarios[name] = (before_s, after_s)
    lends_idle = {d.flavor: d.lends_idle for d in demands}
    return PlanReport(path, label, plan, today, planned, observed, steps, paths, scenarios, lends_idle)


def backtest_what_if(
    unit: OrgUnit, month: str, changes: Mapping[tuple[int, str], Quota], *, minutes: bool = True
) -> dict[str, Any]:
    """Last month (``month``) under ``changes`` (unit id, flavor key → proposed quota; every other unit
    as it was then) beside the month as it ran, for the units of ``unit``'s subtree on the flavors the
    changes name: per unit and in total, and the violations the changes would cause as one change."""
    period = showback_period(month)
    snapshot = org_snapshot_as_of(_closed(period.end))
    edits = {(u, f, GPU): q for (u, f), q in changes.items()}
    violations = check_plan(snapshot, edits)
    flavors = {f for _, f in changes}
    demands, steps = month_demand(snapshot, unit.path, period.start, period.end, minutes=minutes)
    rows, before_all, after_all = [], {}, {}
    for d in demands:
        if d.flavor not in flavors:
            continue
        proposed = {u: Terms(q.guarantee, q.burst, q.lendable) for (u, f), q in changes.items() if f == d.flavor}
        before = simulate(d, {})  # the month as it ran (reproduced), beside the same month with the changes
        after = simulate(d, proposed)
        for u in d.units:
            before_all[(u, d.flavor)], after_all[(u, d.flavor)] = before[u], after[u]
            rows.append(
                {"unit": u, "unit_path": snapshot.path(u), "flavor": d.flavor, "changed": u in proposed,
                 "today": before[u].as_dict(), "proposed": after[u].as_dict()}
            )  # fmt: skip
    rows.sort(key=lambda r: (not r["changed"], r["unit_path"], r["flavor"]))
    return {
        "unit_path": unit.path,
        "month": month,
        "violations": [v.as_dict() for v in violations],
        "units": rows,
        "totals": {"today": totals(before_all).as_dict(), "proposed": totals(after_all).as_dict()},
        "step_minutes": {k: v for k, v in steps.items() if k in flavors},
        "evidence": bool(rows),
    }


def plan_accept(*, actor: Any, unit: OrgUnit, month: str, items: Sequence[int] | None = None, reason: str = "") -> Any:
    """The plan of ``unit`` for ``month`` — all of it, or ``items`` (indexes) when they pass the
    invariants as one change — as **one** change request, approved through the usual flow by someone
    above every unit it changes and applied atomically. InputError naming the items a choice needs,
    or the indexes that do not exist; the change request service checks who may ask (and audits)."""
    from quotas.errors import MAX_TEXT, InputError
    from quotas.services.change_requests import change_request_submit
    from quotas.services.quota import QuotaChange

    report = governance_plan(unit, month)
    plan = report.plan
    snapshot = org_snapshot()  # what the change request changes: today's quotas
    held = {n for n, fact in in_force(report.items(), snapshot).items() if fact is not None}
    mine = [n for n, _ in report.items() if n not in held]
    if not mine:
        said = "every item of it is in force already" if held else "it changes nothing there"
        raise InputError("items", f"the plan for {month} in {unit.path}: {said}", "nothing to request")
    chosen = mine if items is None else sorted(set(items))
    wrong = [i for i in chosen if i not in mine]
    if wrong or not chosen:
        applied = f" (items {', '.join(map(str, sorted(held)))} are in force already)" if held else ""
        raise InputError(
            "items",
            f"the plan's open items in {unit.path} are {', '.join(map(str, mine))}{applied}; got {wrong or 'none'}",
            "pick items it lists",
        )
    if check_plan(snapshot, plan.edits(chosen)):
        missing = sorted({n for i in chosen for n in plan.items[i].needs} - set(chosen) - held)
        raise InputError(
            "items",
            f"items {', '.join(map(str, chosen))} do not pass the invariants as one change",
            f"add items {', '.join(map(str, missing))} (they make room for them), or accept the whole plan"
            if missing
            else "accept the whole plan",
        )
    ids = {v: k for k, v in flavor_keys().items()}
    changes = [
        QuotaChange(i.unit, ids[i.flavor], GPU, i.after.guarantee, i.after.burst, i.after.lendable)
        for i in (plan.items[n] for n in chosen)
    ]
    what = "the whole plan" if chosen == mine else f"items {', '.join(map(str, chosen))} of the plan"
    before, after = report.totals()["today"], report.totals()["plan"]
    summary = (
        f"governance plan {unit.path} {month}, {what}: backtested on {month}, queued "
        f"{before['queued_h']:,.0f} → {after['queued_h']:,.0f} device-hours, idle guarantee "
        f"{before['idle_guarantee_h']:,.0f} → {after['idle_guarantee_h']:,.0f}"
    )
    room = MAX_TEXT - len(summary) - 3
    if len(reason.strip()) > room:  # never cut: the approver reads what was written, or nothing is sent
        raise InputError(
            "reason",
            f"{len(reason.strip()):,} characters is more than the {room:,} left beside the plan's summary",
            "shorten it, or link a document with the rest",
        )
    why = (reason.strip() + " — " if reason.strip() else "") + summary
    return change_request_submit(actor=actor, reason=why, changes=changes)


def latest_month(path: str) -> str | None:
    """The newest month (YYYY-MM) with usage anywhere under ``path``: what a what-if replays."""
    newest = UsageHour.objects.filter(subtree("unit__path", path), minutes__gt=0).aggregate(m=Max("hour"))["m"]
    return newest.strftime("%Y-%m") if newest else None
