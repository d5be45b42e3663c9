"""Findings: run the detectors over the rollups, keep one finding per condition while it lasts, and let
leads act on them (acknowledge, dismiss with a reason, turn the suggestion into a change request).

``findings_detect`` reads each detector's window ending at ``end`` in a few aggregate queries (per-hour
detail only for the candidates the aggregates single out), runs the pure detectors
(``accounting.policy.findings``) and reconciles: a finding whose key is already open widens its window
and takes the new evidence; a new key opens a finding (and mails the unit's leads); an open finding
its detector no longer sees is resolved. A key dismissed less than ``ALLOT_FINDINGS_SNOOZE_DAYS`` ago
is not opened again. Every state change writes an audit row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F, Max, Q, Sum
from django.db.models.functions import TruncDay
from django.utils import timezone

from accounting.models import Allocation, Finding, FindingState, UsageHour, WorkloadRecord
from accounting.policy.findings import (
    BUDGET_KINDS,
    FindingKind,
    Found,
    QuietSpan,
    ReservationWindow,
    StuckWorkload,
    Thresholds,
    UnitWindow,
    contracts_not_honoured,
    demand_above_guarantee,
    idle_guarantees,
    idle_reservations,
    percentile,
    stuck_reservations,
    zombie_allocations,
)
from accounting.reclaims import reclaims
from accounting.selectors import unit_flavor_usage
from accounting.services.anomalies import anomalies_found
from accounting.services.fragmentation import fragmentation_found
from accounting.services.mismatch import mismatch_found
from quotas.access import NotAllowedError, Viewer, is_platform_admin, may_request, signed_in
from quotas.errors import InputError
from quotas.models import ChangeRequest, OrgUnit, Quota, ResourceFlavor
from quotas.policy.quantity import Resource
from quotas.services.audit import audit_event, audit_write, require_reason
from quotas.services.budgets import BudgetChange
from quotas.services.change_requests import change_request_submit
from quotas.services.quota import QuotaChange

GPU = "nvidia.com/gpu"


def thresholds() -> Thresholds:
    """The detectors' thresholds from the settings (ALLOT_FINDINGS_<NAME>); ValueError naming each
    one out of range."""
    found = replace(Thresholds(), **settings.ALLOT_FINDINGS_THRESHOLDS)  # type: ignore[arg-type]
    problems = found.problems()
    if problems:
        raise ValueError("ALLOT_FINDINGS_*: " + "; ".join(problems))
    return found


@dataclass
class DetectionRun:
    end: datetime
    found: dict[str, int] = field(default_factory=dict)
    opened: int = 0
    updated: int = 0
    resolved: int = 0
    snoozed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "end": self.end.isoformat()}


def findings_detect(
    *, end: datetime | None = None, now: datetime | None = None, th: Thresholds | None = None
) -> DetectionRun:
    """Run every detector over its window ending at ``end`` (default: now, to the hour) and reconcile
    the findings (see the module docstring)."""
    now = now or timezone.now()
    end = (end or now).replace(minute=0, second=0, microsecond=0)
    th = th or thresholds()
    prices = {
        f.pk: (f.price_per_device_hour or None) for f in ResourceFlavor.objects.only("id", "price_per_device_hour")
    }
    found: list[Found] = []
    start = end - timedelta(days=th.idle_window_days)
    windows = unit_windows(start, end, th, prices)
    found += _with_plan(
        _with_stranded(idle_guarantees(windows, th, start, end), start, end)
        + demand_above_guarantee(windows, th, start, end),
        start,
        end,
    )
    reservation_start = end - timedelta(days=th.reservation_window_days)
    found += idle_reservations(reservation_windows(reservation_start, end, prices), th, reservation_start, end)
    found += zombie_allocations(quiet_spans(start, end, th, prices), th)
    found += stuck_reservations(stuck_workloads(prices), th, now)
    found += contracts_not_honoured(reclaims(start, end, prices), start, end)
    found += anomalies_found(end, th)
    found += fragmentation_found(end, th)
    found += mismatch_found(start, end, th)
    return findings_reconcile(found, end, now)


def _with_stranded(found: list[Found], start: datetime, end: datetime) -> list[Found]:
    """Idle-guarantee evidence, where minute samples exist: how often, on that flavor, someone queued
    while another unit had at least that many idle guaranteed devices."""
    from accounting.selectors import stranded

    seen: dict[int, Any] = {}
    out = []
    for item in found:
        flavor = item.flavor or 0
        if flavor not in seen:
            seen[flavor] = stranded(flavor, start, end)
        figure = seen[flavor]
        if figure is not None:
            evidence = {
                **item.evidence,
                "minutes_queuing_beside_idle_guarantees": figure.coexist,
                "share_of_minutes": round(figure.share, 4),
                "mean_idle_guaranteed_devices_while_queuing": round(figure.mean_stranded, 1),
            }
            item = replace(item, evidence=evidence)
        out.append(item)
    return out


def _with_plan(found: list[Found], start: datetime, end: datetime) -> list[Found]:
    """A quota finding's suggestion is the governance plan's item for its unit and flavor over the same
    window (``accounting.services.plan``), so a finding, the review and the API never disagree: the
    item's change where it passes the invariants on its own, else what it needs; where the plan keeps
    the quota, why."""
    from accounting.services.plan import plan_for
    from accounting.services.review_plan import sentence

    if not found:
        return found
    keys = {f.pk: f"{f.cluster.name}/{f.name}" for f in ResourceFlavor.objects.select_related("cluster")}
    roots = dict(OrgUnit.objects.filter(pk__in={x.unit for x in found if x.unit}).values_list("id", "path"))
    label = f"{start:%Y-%m-%d %H:00} – {end:%Y-%m-%d %H:00}"
    out = []
    for item in found:
        if item.unit is None or item.flavor is None or item.unit not in roots:
            out.append(item)
            continue
        report = plan_for(roots[item.unit].split("/", 1)[0], start, end, label)
        verdict = report.verdict(item.unit, keys[item.flavor])
        if verdict["item"] is None:
            text = f"The plan for {label} keeps this quota: {verdict['reason']}."
            out.append(replace(item, suggestion=text, action=None, evidence={**item.evidence, "plan": verdict}))
            continue
        step = report.plan.items[verdict["item"]]
        text = f"The plan for {label}: {sentence(step)} on {step.flavor} — {step.reason}."
        action: dict[str, Any] | None = {
            "unit": step.unit, "flavor": item.flavor, "guarantee": step.after.guarantee, "burst": step.after.burst,
            "lendable": step.after.lendable,
        }  # fmt: skip
        if step.needs:
            others = ", ".join(report.plan.items[n].path.rsplit("/", 1)[-1] for n in step.needs[:6])
            text += f" It needs the plan's changes to {others} as well: accept the plan as one change request."
            action = None
        out.append(replace(item, suggestion=text, action=action, evidence={**item.evidence, "plan": verdict}))
    return out


def _hours(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds() // 3600)


def unit_windows(start: datetime, end: datetime, th: Thresholds, prices: dict[int, Decimal | None]) -> list[UnitWindow]:
    """Every unit × flavor with usage in [start, end), totals in one aggregate query; percentiles,
    other units' waiting hours and the daily chart only for the candidates of a detector."""
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    found = unit_flavor_usage(rows)
    totals, units, flavors = found.totals, found.units, found.flavors
    if not totals:
        return []
    expected = _hours(start, end)
    candidates = []
    for (unit, flavor), r in totals.items():
        own = found.own_guarantee_h(unit, flavor)
        low = own > 0 and r["w"] < th.idle_used_below * own
        busy = r["hours"] and r["above"] >= th.demand_share_above * r["hours"]
        if low or busy:
            candidates.append((unit, flavor, own))
    detail = _candidate_detail(start, end, candidates)
    windows = []
    for unit, flavor, own in candidates:
        r = totals[(unit, flavor)]
        p95_held, p95_demand, waiting = detail["stats"].get((unit, flavor), (0.0, 0.0, 0))
        q = found.quotas.get((unit, flavor))
        f = flavors[flavor]
        windows.append(
            UnitWindow(
                unit=unit, flavor=flavor, path=units[unit].path, flavor_key=f"{f.cluster.name}/{f.name}",
                guarantee=q.guarantee if q else 0, lendable=q.lendable if q else 0,
                children_guarantee=found.children_guarantee(unit, flavor),
                guarantee_h=own, within_h=r["w"] or 0, borrowed_h=r["b"] or 0, lent_h=r["lent_h"] or 0,
                pending_h=r["p"] or 0, hours=r["hours"], expected_hours=expected, hours_demand_above=r["above"],
                p95_held=p95_held, p95_demand=p95_demand, others_waiting_hours=waiting,
                price=prices.get(flavor), daily=detail["daily"].get((unit, flavor), []),
            )
        )  # fmt: skip
    return windows


# Per candidate: the 95th percentiles of devices held and held + queued per hour, and the hours in
# which another unit on the flavor queued or borrowed while the candidate had telemetry. One query
# for every candidate (PostgreSQL's percentile_disc; elsewhere the hourly values are read instead).
CANDIDATES = """
WITH waiting AS (
  SELECT flavor_id, hour, SUM(CASE WHEN pending > 0 OR borrowed > 0 THEN 1 ELSE 0 END) AS n
  FROM accounting_usagehour WHERE hour >= %(start)s AND hour < %(end)s AND flavor_id = ANY(%(flavors)s)
  GROUP BY flavor_id, hour
)
SELECT u.unit_id, u.flavor_id,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY u.allocated * 60.0 / u.minutes),
       percentile_disc(0.95) WITHIN GROUP (ORDER BY (u.allocated + u.pending) * 60.0 / u.minutes),
       SUM(CASE WHEN w.n - CASE WHEN u.pending > 0 OR u.borrowed > 0 THEN 1 ELSE 0 END > 0 THEN 1 ELSE 0 END)
FROM accounting_usagehour u JOIN waiting w ON w.flavor_id = u.flavor_id AND w.hour = u.hour
WHERE u.hour >= %(start)s AND u.hour < %(end)s AND u.minutes > 0
  AND u.unit_id = ANY(%(units)s) AND u.flavor_id = ANY(%(flavors)s)
GROUP BY u.unit_id, u.flavor_id
"""


def _candidate_detail(start: datetime, end: datetime, candidates: list[tuple[int, int, float]]) -> dict[str, Any]:
    """Percentiles and others' waiting hours (``CANDIDATES``) and the daily chart of each candidate:
    two queries whatever their number."""
    from django.db import connection

    pairs = {(u, f) for u, f, _ in candidates}
    stats: dict[tuple[int, int], tuple[float, float, int]] = {}
    daily: dict[tuple[int, int], list[tuple[str, float, float]]] = defaultdict(list)
    if not pairs:
        return {"stats": stats, "daily": daily}
    units, flavors = sorted({u for u, _ in pairs}), sorted({f for _, f in pairs})
    rows = UsageHour.objects.filter(
        hour__gte=start, hour__lt=end, minutes__gt=0, unit_id__in=units, flavor_id__in=flavors
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(CANDIDATES, {"start": start, "end": end, "units": units, "flavors": flavors})
            for unit, flavor, held, demand, waiting in cursor.fetchall():
                if (unit, flavor) in pairs:
                    stats[(unit, flavor)] = (float(held or 0), float(demand or 0), int(waiting or 0))
    else:
        stats = _candidate_stats_portable(start, end, pairs, rows)
    for d in (
        rows.annotate(day=TruncDay("hour")).values("unit_id", "flavor_id", "day")
        .annotate(a=Sum("allocated"), p=Sum("pending"), m=Sum("minutes")).order_by("unit_id", "flavor_id", "day")
    ):  # fmt: skip
        key = (d["unit_id"], d["flavor_id"])
        if key in pairs:
            daily[key].append(
                (d["day"].date().isoformat(), round(d["a"] * 60 / d["m"], 2), round(d["p"] * 60 / d["m"], 2))
            )
    return {"stats": stats, "daily": daily}


def _candidate_stats_portable(
    start: datetime, end: datetime, pairs: set[tuple[int, int]], rows: Any
) -> dict[tuple[int, int], tuple[float, float, int]]:
    """The same as ``CANDIDATES`` on a database without percentile_disc (the embedded SQLite)."""
    flavors = {f for _, f in pairs}
    waiting: dict[tuple[int, datetime], int] = defaultdict(int)
    for flavor, hour in (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, flavor_id__in=flavors)
        .filter(Q(pending__gt=0) | Q(borrowed__gt=0)).values_list("flavor_id", "hour")
    ):  # fmt: skip
        waiting[(flavor, hour)] += 1
    held: dict[tuple[int, int], list[float]] = defaultdict(list)
    demand: dict[tuple[int, int], list[float]] = defaultdict(list)
    others: dict[tuple[int, int], int] = defaultdict(int)
    for unit, flavor, hour, a, p, b, m in rows.values_list(
        "unit_id", "flavor_id", "hour", "allocated", "pending", "borrowed", "minutes"
    ):
        key = (unit, flavor)
        if key not in pairs:
            continue
        held[key].append(a * 60 / m)
        demand[key].append((a + p) * 60 / m)
        if waiting[(flavor, hour)] - (1 if p > 0 or b > 0 else 0) > 0:
            others[key] += 1
    return {key: (percentile(held[key], 0.95), percentile(demand[key], 0.95), others[key]) for key in held}


def reservation_windows(start: datetime, end: datetime, prices: dict[int, Decimal | None]) -> list[ReservationWindow]:
    """Flavors with reservations: the busiest hour's devices held by all units (one aggregate query)."""
    flavors = list(
        ResourceFlavor.objects.select_related("cluster")
        .annotate(reserved=Sum("reservations__devices"))
        .filter(reserved__gt=0)
    )
    out = []
    for f in flavors:
        per_hour = (
            UsageHour.objects.filter(flavor=f, hour__gte=start, hour__lt=end, minutes__gt=0)
            .values("hour").annotate(a=Sum("allocated"), m=Max("minutes"))
        )  # fmt: skip
        held = [r["a"] * 60 / r["m"] for r in per_hour]
        out.append(
            ReservationWindow(
                f.pk, f"{f.cluster.name}/{f.name}", f.reserved, f.physical_devices, f.headroom_devices,  # type: ignore[attr-defined]
                max(held, default=0.0), len(held), _hours(start, end), prices.get(f.pk),
            )
        )  # fmt: skip
    return out


def quiet_spans(start: datetime, end: datetime, th: Thresholds, prices: dict[int, Decimal | None]) -> list[QuietSpan]:
    """Runs of consecutive hours in which a unit held devices on a flavor with measured activity below
    ``zombie_active_below`` of them (only such hours are read), with the workloads that held devices
    through the whole run."""
    quiet = (
        UsageHour.objects.filter(hour__gte=start, hour__lt=end, allocated__gt=0, active__isnull=False)
        .filter(active__lt=F("allocated") * th.zombie_active_below)
        .order_by("unit_id", "flavor_id", "hour")
        .values_list("unit_id", "flavor_id", "hour", "allocated", "active")
    )
    spans: list[list[Any]] = []
    for unit, flavor, hour, held, active in quiet:
        last = spans[-1] if spans else None
        if last and last[0] == unit and last[1] == flavor and last[3] == hour:
            last[3], last[4], last[5] = hour + timedelta(hours=1), last[4] + held, last[5] + active
        else:
            spans.append([unit, flavor, hour, hour + timedelta(hours=1), held, active])
    if not spans:
        return []
    names = dict(OrgUnit.objects.filter(pk__in={s[0] for s in spans}).values_list("id", "path"))
    flavors = {f.pk: f"{f.cluster.name}/{f.name}" for f in ResourceFlavor.objects.select_related("cluster")}
    out = []
    running: dict[tuple[int, int], list[tuple[Any, Any, str]]] = defaultdict(list)
    for unit, flavor, begins, ends, job in (  # every span's candidates in one query
        Allocation.objects.filter(unit_id__in={s[0] for s in spans}, flavor_id__in={s[1] for s in spans})
        .filter(start__lt=end)
        .filter(Q(end__isnull=True) | Q(end__gt=start))
        .order_by("start")
        .values_list("unit_id", "flavor_id", "start", "end", "record__job_id")
    ):
        running[(unit, flavor)].append((begins, ends, job))
    for unit, flavor, begins, ends, held, active in spans:
        holders = [
            job
            for start_at, end_at, job in running[(unit, flavor)]
            if start_at <= begins and (end_at is None or end_at >= ends)
        ][:20]
        out.append(
            QuietSpan(
                unit,
                flavor,
                names[unit],
                flavors[flavor],
                begins,
                ends,
                held,
                active,
                list(holders),
                prices.get(flavor),
            )
        )
    return out


def stuck_workloads(prices: dict[int, Decimal | None]) -> list[StuckWorkload]:
    """Kueue Workloads last seen evicted with their quota still reserved (one query)."""
    rows = WorkloadRecord.objects.filter(
        track__quota_reserved=True, state__in=["evicted", "preempted", "requeued"]
    ).select_related("unit")
    out = []
    for r in rows:
        evictions = [e for e in r.evictions if e.get("at")]
        if not evictions:
            continue
        last = evictions[-1]
        out.append(
            StuckWorkload(
                r.pk, r.unit_id, r.flavor_id, r.job_id, r.unit.path if r.unit else "", r.devices,
                datetime.fromisoformat(last["at"]), last.get("reason", ""), prices.get(r.flavor_id or 0),
            )
        )  # fmt: skip
    return out


@transaction.atomic
def findings_reconcile(
    found: list[Found], end: datetime, now: datetime, kinds: frozenset[FindingKind] | None = None
) -> DetectionRun:
    """Open, widen and resolve the findings of ``kinds`` (default: the daily detectors') against what
    was ``found`` (see the module docstring)."""
    run = DetectionRun(end=end)
    ours = [k.value for k in (kinds if kinds is not None else set(FindingKind) - BUDGET_KINDS)]
    live = {
        f.key: f
        for f in Finding.objects.select_for_update(of=("self",))
        .select_related("unit")
        .filter(state__in=[FindingState.OPEN, FindingState.ACKNOWLEDGED], kind__in=ours)
    }
    snooze = now - timedelta(days=settings.ALLOT_FINDINGS_SNOOZE_DAYS)
    dismissed = set(
        Finding.objects.filter(state=FindingState.DISMISSED, closed_at__gte=snooze, kind__in=ours).values_list(
            "key", flat=True
        )
    )
    seen = set()
    updated, created, resolved = [], [], []
    for item in found:
        run.found[item.kind.value] = run.found.get(item.kind.value, 0) + 1
        seen.add(item.key)
        fields = {
            "summary": item.summary[:500], "evidence": dict(item.evidence), "cost": item.cost,
            "suggestion": item.suggestion, "action": dict(item.action) if item.action else None,
            "partial": item.partial, "updated_at": now,
        }  # fmt: skip
        existing = live.get(item.key)
        if existing is not None:
            for name, value in fields.items():
                setattr(existing, name, value)
            existing.window_start = min(existing.window_start, item.start)
            existing.window_end = max(existing.window_end, item.end)
            existing.detections += 1
            updated.append(existing)
            continue
        if item.key in dismissed:
            run.snoozed += 1
            continue
        created.append(
            Finding(
                kind=item.kind.value, key=item.key, unit_id=item.unit, flavor_id=item.flavor, window_start=item.start,
                window_end=item.end, opened_at=now, **fields,
            )
        )  # fmt: skip
    for key, finding in live.items():
        if key in seen or finding.window_end > end:
            continue  # still there, or seen by a detection of a later window
        finding.state, finding.closed_at, finding.updated_at = FindingState.RESOLVED, now, now
        finding.state_reason = f"no longer detected in the window ending {end:%Y-%m-%d %H:00}"
        resolved.append(finding)
    # in bulk: one evaluation may widen or open thousands at once (bench/budgets.py)
    Finding.objects.bulk_update(updated, UPDATED, batch_size=500)
    Finding.objects.bulk_update(resolved, ["state", "closed_at", "updated_at", "state_reason"], batch_size=500)
    opened = Finding.objects.bulk_create(created, batch_size=1000)
    paths = dict(OrgUnit.objects.filter(pk__in={f.unit_id for f in opened if f.unit_id}).values_list("id", "path"))
    events = [
        _event(None, f, "finding_open", None, {"summary": f.summary}, "detected", paths.get(f.unit_id or 0, ""))
        for f in opened
    ]
    events += [
        _event(None, f, "finding_resolve", {"state": "open"}, {"state": "resolved"}, f.state_reason) for f in resolved
    ]
    run.updated, run.opened, run.resolved = len(updated), len(opened), len(resolved)
    if events:
        audit_write(events)
    _mail_opened(opened, paths)
    return run


UPDATED = ["summary", "evidence", "cost", "suggestion", "action", "partial", "updated_at", "window_start",
           "window_end", "detections"]  # fmt: skip
DIGEST_OVER = 5
"""A lead told of more new findings than this at once gets one mail listing them, not one each."""


def _event(
    actor: Viewer, finding: Finding, action: str, before: Any, after: Any, reason: str, path: str | None = None
) -> Any:
    if path is None:
        path = finding.unit.path if finding.unit else ""
    return audit_event(
        actor=actor, action=action, obj_type="finding", obj_id=finding.pk, obj_repr=f"#{finding.pk} {finding.summary}",
        before=before, after=after, reason=reason, unit_path=path,
    )  # fmt: skip


def _lead_emails(unit_ids: set[int]) -> dict[int, list[str]]:
    """Per unit: its leads' addresses, or those of the nearest unit above it that has leads (2 queries)."""
    if not unit_ids:
        return {}
    parents = dict(OrgUnit.objects.values_list("id", "parent_id"))
    own: dict[int, set[str]] = defaultdict(set)
    leads = OrgUnit.leads.through.objects.filter(user__is_active=True)
    for unit_id, email in leads.values_list("orgunit_id", "user__email"):
        own[unit_id].add(email)
    found = {}
    for uid in unit_ids:
        node: int | None = uid
        while node is not None and node not in own:
            node = parents.get(node)
        found[uid] = sorted(e for e in own.get(node, set()) if e) if node is not None else []
    return found


def _mail_opened(opened: list[Finding], paths: Mapping[int, str]) -> None:
    """Each new finding to its unit's leads; a lead with more than DIGEST_OVER gets one list instead."""
    emails = _lead_emails({f.unit_id for f in opened if f.unit_id})
    per_person: dict[str, list[Finding]] = defaultdict(list)
    for finding in opened:
        for email in emails.get(finding.unit_id or 0, []):
            per_person[email].append(finding)
    for email, findings in sorted(per_person.items()):
        if len(findings) <= DIGEST_OVER:
            for finding in findings:
                _mail_finding(finding, [email])
            continue
        lines = "\n".join(f"  - {paths.get(f.unit_id or 0, '')}: {f.summary}" for f in findings[:50])
        more = f"\n  … and {len(findings) - 50} more" if len(findings) > 50 else ""
        subject = f"[Allot] {len(findings)} new findings on units you lead"
        text = (
            f"{len(findings)} new findings on units you lead:\n\n{lines}{more}\n\nEach with its evidence: /findings/\n"
        )
        transaction.on_commit(partial(send_mail, subject, text, None, [email], fail_silently=True))


def _mail_finding(finding: Finding, emails: list[str]) -> None:
    subject = f"[Allot] {finding.get_kind_display()}: {finding.summary}"[:200]
    cost = f"At stake: {finding.cost} {settings.ALLOT_CURRENCY}\n" if finding.cost is not None else ""
    if finding.kind.startswith("budget_"):  # device-hours, not money
        ev = finding.evidence
        cost = f"Spent: {ev.get('spent_h')} of {ev.get('allowance_h')} device-hours this {ev.get('period')}\n"
    elif finding.kind == "demand_above_guarantee":  # waiting, not spend
        queued = finding.evidence.get("queued_h")
        cost = f"Waiting: {queued} device-hours queued" + (
            f" (worth {finding.cost} {settings.ALLOT_CURRENCY} of devices at the flavor's price; not spend)\n"
            if finding.cost is not None
            else "\n"
        )
    text = f"{finding.summary}\n\n{cost}Suggested: {finding.suggestion}\n\nFinding #{finding.pk}: /findings/\n"
    transaction.on_commit(lambda: send_mail(subject, text, None, emails, fail_silently=True))


def _live(finding: Finding) -> Finding:
    finding = Finding.objects.select_for_update(of=("self",)).select_related("unit").get(pk=finding.pk)
    if finding.state not in (FindingState.OPEN, FindingState.ACKNOWLEDGED):
        raise InputError(
            "state", f"finding #{finding.pk} is {finding.state}", "only open or acknowledged findings change"
        )
    return finding


def request_suggested_change(*, actor: Viewer, action: Mapping[str, Any], reason: str) -> ChangeRequest:
    """A change request for a suggested quota change (a finding's or a review's): ``unit``,
    ``flavor`` and ``guarantee``, ``burst`` and/or ``lendable``. A smaller guarantee given alone brings a larger
    lendable part down with it (lendable ≤ guarantee). Approved through the usual flow."""
    if action.get("kind") == "budget":  # a budget finding's: raise the budget
        raise_to = BudgetChange(int(action["unit"]), int(action["flavor"]), device_hours=action["device_hours"])
        return change_request_submit(actor=actor, reason=reason[:2000], changes=[raise_to])
    guarantee, lendable, burst = action.get("guarantee"), action.get("lendable"), action.get("burst")
    if guarantee is not None and lendable is None:
        current = Quota.objects.filter(unit_id=action["unit"], flavor_id=action["flavor"], resource=GPU).first()
        if current and current.lendable > guarantee:
            lendable = guarantee
    change = QuotaChange(int(action["unit"]), int(action["flavor"]), Resource.GPU, guarantee, burst, lendable)
    return change_request_submit(actor=actor, reason=reason[:2000], changes=[change])


def _may_act(actor: Viewer, finding: Finding) -> None:
    """Leads of the finding's unit or a unit above it, and platform admins (quotas.access)."""
    user = signed_in(actor)
    if finding.unit is None and is_platform_admin(user):
        return
    if finding.unit is None or not may_request(user, finding.unit):
        path = finding.unit.path if finding.unit else "this flavor"
        raise NotAllowedError(f"you lead neither {path} nor a unit above it")


@transaction.atomic
def finding_acknowledge(*, actor: Viewer, finding: Finding, reason: str = "") -> Finding:
    """Mark a finding as seen by a lead (it stays live and keeps being updated)."""
    finding = _live(finding)
    _may_act(actor, finding)
    before = finding.state
    finding.state, finding.updated_at = FindingState.ACKNOWLEDGED, timezone.now()
    finding.state_reason = reason.strip()
    finding.save()
    audit_write(
        [
            _event(
                actor,
                finding,
                "finding_acknowledge",
                {"state": before},
                {"state": finding.state},
                reason.strip() or "acknowledged",
            )
        ]
    )
    return finding


@transaction.atomic
def finding_dismiss(*, actor: Viewer, finding: Finding, reason: str) -> Finding:
    """Close a finding as not worth acting on; the reason is required and kept, and the same condition
    is not opened again for ALLOT_FINDINGS_SNOOZE_DAYS."""
    reason = require_reason(reason)
    finding = _live(finding)
    _may_act(actor, finding)
    before = finding.state
    now = timezone.now()
    finding.state, finding.state_reason, finding.closed_at, finding.updated_at = (
        FindingState.DISMISSED,
        reason,
        now,
        now,
    )
    finding.save()
    audit_write([_event(actor, finding, "finding_dismiss", {"state": before}, {"state": finding.state}, reason)])
    return finding


@transaction.atomic
def finding_request_change(*, actor: Viewer, finding: Finding, reason: str = "") -> ChangeRequest:
    """Turn the finding's suggested action into a change request, with the evidence as its reason;
    approved through the usual flow. The finding is acknowledged and linked to the request."""
    finding = _live(finding)
    if not finding.action:
        raise InputError(
            "action",
            f"finding #{finding.pk} suggests no quota change",
            "act on it outside Allot, then dismiss it with a reason",
        )
    why = (
        reason.strip() + " — " if reason.strip() else ""
    ) + f"finding #{finding.pk}: {finding.summary}. {finding.suggestion}"
    request = request_suggested_change(actor=actor, action=finding.action, reason=why)
    before = finding.state
    finding.change_request, finding.state, finding.updated_at = request, FindingState.ACKNOWLEDGED, timezone.now()
    finding.state_reason = f"change request #{request.pk}"
    finding.save()
    audit_write(
        [
            _event(
                actor,
                finding,
                "finding_request_change",
                {"state": before},
                {"state": finding.state, "change_request": request.pk},
                why[:500],
            )
        ]
    )
    return request
