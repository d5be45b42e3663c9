"""Keep one finding per condition while it lasts: open, widen, resolve in bulk, snooze what was
dismissed; mail each new finding to its unit's leads (one digest past DIGEST_OVER). Every state change
writes an audit row."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction

from accounting.models import Finding, FindingState
from accounting.policy.findings import BUDGET_KINDS, FindingKind, Found
from quotas.access import Viewer
from quotas.models import OrgUnit
from quotas.services.audit import audit_event, audit_write


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


@transaction.atomic
def findings_reconcile(
    found: list[Found], end: datetime, now: datetime, kinds: frozenset[FindingKind] | None = None
) -> DetectionRun:
    """Open, widen and resolve the findings of ``kinds`` (default: the daily detectors') against what
    was ``found`` (see the module docstring)."""
    run = DetectionRun(end=end)
    ours = [k.value for k in (kinds if kinds is not None else set(FindingKind) - BUDGET_KINDS)]
    _one_at_a_time(ours)
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
        finding_event(None, f, "finding_open", None, {"summary": f.summary}, "detected", paths.get(f.unit_id or 0, ""))
        for f in opened
    ]
    events += [
        finding_event(None, f, "finding_resolve", {"state": "open"}, {"state": "resolved"}, f.state_reason)
        for f in resolved
    ]
    run.updated, run.opened, run.resolved = len(updated), len(opened), len(resolved)
    if events:
        audit_write(events)
    _mail_opened(opened, paths)
    return run


def _one_at_a_time(kinds: list[str]) -> None:
    """Reconciles of the same kinds take turns (until this transaction ends): two at once both saw no live
    finding for a key, both inserted one, and the second died on ``finding_one_live_per_key`` (two
    budget evaluations after two rollups). On PostgreSQL a transaction-level advisory lock keyed by the
    kinds; SQLite lets one writer in at a time already."""
    if connection.vendor != "postgresql":
        return
    key = zlib.crc32(",".join(sorted(kinds)).encode()) & 0x7FFFFFFF
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ADVISORY_NAMESPACE, key])


ADVISORY_NAMESPACE = 0x414C4F54  # "ALOT": the first key of Allot's advisory locks (the second: what is locked)


UPDATED = ["summary", "evidence", "cost", "suggestion", "action", "partial", "updated_at", "window_start",
           "window_end", "detections"]  # fmt: skip


DIGEST_OVER = 5
"""A lead told of more new findings than this at once gets one mail listing them, not one each."""


def finding_event(
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
    """Each new finding to its unit's leads, and a fleet-wide one (no unit: fragmentation, a stranded pool)
    to the fleet's operators (ALLOT_FINDINGS_OPERATOR_EMAILS); anyone with more than DIGEST_OVER gets one
    list instead."""
    emails = _lead_emails({f.unit_id for f in opened if f.unit_id})
    emails[0] = list(settings.ALLOT_FINDINGS_OPERATOR_EMAILS)
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
