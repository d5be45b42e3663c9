"""What a lead does with a finding: acknowledge it, dismiss it with a reason (snoozed for
ALLOT_FINDINGS_SNOOZE_DAYS), or turn its suggestion into a change request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounting.models import Finding, FindingState
from accounting.services.finding_records import finding_event
from quotas.access import NotAllowedError, Viewer, is_platform_admin, may_request, signed_in
from quotas.errors import InputError
from quotas.models import ChangeRequest, Quota
from quotas.policy.quantity import Resource
from quotas.services.audit import audit_write, require_reason
from quotas.services.budgets import BudgetChange
from quotas.services.change_requests import change_request_submit
from quotas.services.quota import QuotaChange

GPU = "nvidia.com/gpu"


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
        return change_request_submit(actor=actor, reason=reason, changes=[raise_to])
    guarantee, lendable, burst = action.get("guarantee"), action.get("lendable"), action.get("burst")
    if guarantee is not None and lendable is None:
        current = Quota.objects.filter(unit_id=action["unit"], flavor_id=action["flavor"], resource=GPU).first()
        if current and current.lendable > guarantee:
            lendable = guarantee
    change = QuotaChange(int(action["unit"]), int(action["flavor"]), Resource.GPU, guarantee, burst, lendable)
    return change_request_submit(actor=actor, reason=reason, changes=[change])


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
            finding_event(
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
    audit_write([finding_event(actor, finding, "finding_dismiss", {"state": before}, {"state": finding.state}, reason)])
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
            finding_event(
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
