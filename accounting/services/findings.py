"""Findings: run the detectors over the rollups and keep one finding per condition while it lasts.

``findings_detect`` reads each detector's window ending at ``end`` (accounting.selectors.finding_windows),
runs the pure detectors (``accounting.policy.findings``) and reconciles (.finding_records): a finding
whose key is already open widens its window and takes the new evidence; a new key opens a finding (and
mails the unit's leads); an open finding its detector no longer sees is resolved. A key dismissed less
than ``ALLOT_FINDINGS_SNOOZE_DAYS`` ago is not opened again. Every state change writes an audit row.
Leads act on findings through .finding_actions (acknowledge, dismiss with a reason, turn the
suggestion into a change request).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from accounting.policy.findings import Found, Thresholds, demand_above_guarantee, idle_guarantees
from accounting.policy.hold_findings import (
    contracts_not_honoured,
    idle_reservations,
    stuck_reservations,
    zombie_allocations,
)
from accounting.reclaims import reclaims
from accounting.selectors.finding_windows import quiet_spans, reservation_windows, stuck_workloads, unit_windows
from accounting.services.anomalies import anomalies_found
from accounting.services.finding_records import DetectionRun, findings_reconcile
from accounting.services.fragmentation import fragmentation_found
from accounting.services.kueue_metrics import kueue_crosscheck_found
from accounting.services.mismatch import mismatch_found
from accounting.services.plan_report import PlanReport
from quotas.models import OrgUnit, ResourceFlavor


def thresholds() -> Thresholds:
    """The detectors' thresholds from the settings (ALLOT_FINDINGS_<NAME>); ValueError naming each
    one out of range."""
    found = replace(Thresholds(), **settings.ALLOT_FINDINGS_THRESHOLDS)  # type: ignore[arg-type]
    problems = found.problems()
    if problems:
        raise ValueError("ALLOT_FINDINGS_*: " + "; ".join(problems))
    return found


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
    found += kueue_crosscheck_found(end - timedelta(hours=24), end)
    return findings_reconcile(found, end, now)


def _with_stranded(found: list[Found], start: datetime, end: datetime) -> list[Found]:
    """Idle-guarantee evidence, where minute samples exist: how often, on that flavor, someone queued
    while another unit had at least that many idle guaranteed devices."""
    from accounting.selectors.fairness import stranded

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
    plans: dict[str, PlanReport] = {}  # one plan per organisation per run, however many findings it has
    out = []
    for item in found:
        if item.unit is None or item.flavor is None or item.unit not in roots:
            out.append(item)
            continue
        root = roots[item.unit].split("/", 1)[0]
        if root not in plans:
            plans[root] = plan_for(root, start, end, label)
        report = plans[root]
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
