"""Change requests: asking for more than your envelope, and deciding on it.

A request holds quota items and GPU-hour budget items (``"kind": "budget"``; quotas.services.budgets).
Approval applies them through :func:`quota_set_bulk` and :func:`budget_set_bulk` in one transaction,
with the versions the requester saw, so it is re-validated at that moment: a request made stale by
other changes (a quota or budget edited meanwhile, or an invariant that no longer holds) is refused
with the explanation, and nothing of it is applied.
Mail goes out after commit: to the approvers on submit, to requester and approver on a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from quotas.access import (
    NotAllowedError,
    Viewer,
    approvers,
    common_unit,
    may_approve_all,
    may_request,
    request_units,
    signed_in,
)
from quotas.errors import InputError, StaleVersionError, clean_text
from quotas.models import Budget, ChangeRequest, ChangeRequestStatus, OrgUnit, Quota, ResourceFlavor
from quotas.policy.invariants import check_quota_edits
from quotas.policy.quantity import Resource, format_quantity
from quotas.policy.violations import PolicyViolationError, Violation
from quotas.selectors import flavor_keys, neighbourhood_snapshot

from .audit import audit_event, audit_write, require_reason
from .budgets import BudgetChange, budget_proposal, budget_set_bulk
from .envelope import who_decides
from .locks import lock_units
from .quota import QuotaChange, proposed_quota, quota_set_bulk
from .request_items import BUDGET_SHOWN, Item, as_change, as_dict

WORDS = {Resource.GPU: "GPUs", Resource.CPU: "CPU cores", Resource.MEMORY: "memory"}


@dataclass(frozen=True)
class RequestLine:
    """One item of a request as people read it: what it holds now and what is asked, per field."""

    unit_path: str
    flavor: str
    resource: Resource | None
    """None: a GPU-hour budget."""
    fields: tuple[tuple[str, str, str], ...]
    """(field, now, asked) for each field the item changes; quantities as people write them."""

    @property
    def what(self) -> str:
        return self.resource.value if self.resource else "GPU-hour budget"

    def sentence(self) -> str:
        what = "; ".join(f"{name} {now} → {asked}" for name, now, asked in self.fields) or "no change"
        return f"{self.unit_path}, {self.flavor} {WORDS[self.resource] if self.resource else 'budget'}: {what}"


def _shown(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(value) or "none"
    return f"{value:,}" if isinstance(value, int) else str(value)


def request_lines(request: ChangeRequest) -> list[RequestLine]:
    """Every item of ``request``, current → proposed: while pending, current as the quota or budget is now;
    once decided, as they were when it was decided (kept in its outcome, so an applied request reads
    90 → 100, not 100 → 100)."""
    frozen = (request.outcome or {}).get("lines") if request.status != ChangeRequestStatus.PENDING else None
    if frozen:
        return [
            RequestLine(path, flavor, Resource(what) if what else None, tuple((n, a, b) for n, a, b in fields))
            for path, flavor, what, fields in frozen
        ]
    ids = {int(c["unit"]) for c in request.changes}
    paths = dict(OrgUnit.objects.filter(pk__in=ids).values_list("pk", "path"))
    flavors = {
        f.pk: f"{f.key} ({f.accelerator_model})"
        for f in ResourceFlavor.objects.select_related("cluster").filter(pk__in={c["flavor"] for c in request.changes})
    }
    current = {(q.unit_id, q.flavor_id, q.resource): q for q in Quota.objects.filter(unit_id__in=ids)}
    budgets = {(b.unit_id, b.flavor_id): b for b in Budget.objects.filter(unit_id__in=ids)}
    lines = []
    for c in request.changes:
        path, flavor = paths.get(c["unit"], f"unit #{c['unit']}"), flavors.get(c["flavor"], "?")
        if c.get("kind") == "budget":
            now = budgets.get((c["unit"], c["flavor"]))
            pairs = [(n, _shown(getattr(now, n) if now else None), _shown(c[n])) for n in BUDGET_SHOWN]
            if now is not None:
                pairs = [(n, old, new) for n, old, new in pairs if old != new]
            lines.append(RequestLine(path, flavor, None, tuple(pairs)))
            continue
        resource = Resource(c["resource"])
        row = current.get((c["unit"], c["flavor"], resource.value))
        fields = tuple(
            (name, format_quantity(resource, getattr(row, name) if row else 0), format_quantity(resource, c[name]))
            for name in ("guarantee", "burst", "lendable")
            if c[name] is not None
        )
        lines.append(RequestLine(path, flavor, resource, fields))
    return sorted(lines, key=lambda line: (line.unit_path, line.flavor, line.what))


def request_violations(request: ChangeRequest) -> list[Violation]:
    """What applying ``request`` now would break (the checks approval runs), for its page and mail."""
    items = [as_change(c) for c in request.changes]
    units = {u.pk: u for u in OrgUnit.objects.filter(pk__in={c.unit_id for c in items}, archived_at__isnull=True)}
    if len(units) != len({c.unit_id for c in items}):
        return []  # a unit was archived: approval refuses it with that reason
    quotas, budgets = _split(items)
    found = _violations(quotas, units, _current(units)) if quotas else []
    if budgets:
        try:
            found += budget_proposal(budgets)[1]
        except InputError:
            return found  # approval refuses it with the field and its fix
    return found


def _split(items: Sequence[Item]) -> tuple[list[QuotaChange], list[BudgetChange]]:
    return [c for c in items if isinstance(c, QuotaChange)], [c for c in items if isinstance(c, BudgetChange)]


def _current(units: dict[int, OrgUnit]) -> dict[tuple[int, int, str], Quota]:
    return {(q.unit_id, q.flavor_id, q.resource): q for q in Quota.objects.filter(unit_id__in=units)}


def _violations(
    changes: Sequence[QuotaChange], units: dict[int, OrgUnit], current: dict[tuple[int, int, str], Quota]
) -> list[Violation]:
    """What ``changes`` would break now: the core's incremental check on the units' neighbourhood."""
    keys = flavor_keys()
    edits = {
        (c.unit_id, keys[c.flavor_id], c.resource): proposed_quota(
            c, current.get((c.unit_id, c.flavor_id, c.resource.value))
        )
        for c in changes
    }
    return check_quota_edits(neighbourhood_snapshot(units), edits)


def portal_link(path: str) -> str:
    from django.conf import settings

    return f"{settings.ALLOT_PORTAL_URL.rstrip('/')}{path}"


@transaction.atomic
def change_request_submit(*, actor: Viewer, reason: str, changes: Sequence[Item]) -> ChangeRequest:
    """Record a request for ``changes`` — quotas and GPU-hour budgets — (with the versions they were
    based on; a budget item with every field as it would be set) and tell approvers.

    Raises NotAllowedError when the actor leads none of the units; InputError without a reason or
    changes; PolicyViolationError when the changes break an invariant even now (the request could
    never be approved as it is: the message says what else would have to change).

    Idempotent: the same pending request sent again by the same person (a double click, a browser
    retrying a POST) returns the first one; nothing new is recorded or mailed.
    """
    actor = signed_in(actor)
    reason = require_reason(reason)
    if not changes:
        raise InputError("changes", "no quota changes given", "send at least one change")
    seen: set[tuple[int, int, str]] = set()
    for change in changes:  # two items for one quota could never be approved as one change
        key = (change.unit_id, change.flavor_id, str(getattr(change, "resource", "budget")))
        if key in seen:
            raise InputError(
                "changes",
                "the same unit, flavor and resource (or budget) appears twice",
                "send each quota or budget once, with its new values",
            )
        seen.add(key)
    units = {u.pk: u for u in OrgUnit.objects.filter(pk__in={c.unit_id for c in changes}, archived_at__isnull=True)}
    for change in changes:
        unit = units.get(change.unit_id)
        if unit is None:
            raise InputError("unit", f"unit #{change.unit_id} does not exist or is archived", "pick an active unit")
        if not may_request(actor, unit):
            raise NotAllowedError(f"you lead neither {unit.path} nor a unit above it")
    # the request belongs to the lowest unit above (or at) all its items; only someone above every item
    # may approve it (quotas/access.py)
    top = common_unit(units.values()) or min(units.values(), key=lambda u: u.depth)
    current = _current(units)
    quotas, budgets = _split(changes)
    based: list[Item] = []
    for c in quotas:
        row = current.get((c.unit_id, c.flavor_id, c.resource.value))
        version = c.expected_version if c.expected_version is not None else (row.version if row else 0)
        based.append(QuotaChange(c.unit_id, c.flavor_id, c.resource, c.guarantee, c.burst, c.lendable, version))
    problems = _violations(quotas, units, current) if quotas else []
    if budgets:
        full, broken = budget_proposal(budgets)
        based += full
        problems += broken
    if problems:  # a unit above the asker's without room: whose it is to give, not "make a change request"
        theirs = {u.path for u in OrgUnit.objects.filter(path__in={v.unit for v in problems}) if may_request(actor, u)}
        raise PolicyViolationError([v if v.unit in theirs else who_decides(v) for v in problems])
    lock_units([top.pk])  # two identical submissions at once: the second sees the first
    same = ChangeRequest.objects.filter(
        unit=top, requested_by=actor, status=ChangeRequestStatus.PENDING, reason=reason
    ).order_by("pk")
    wanted = [as_dict(c) for c in based]
    for earlier in same:
        if earlier.changes == wanted:
            return earlier
    request = ChangeRequest.objects.create(
        unit=top, requested_by=actor, reason=reason, created_at=timezone.now(), changes=[as_dict(c) for c in based]
    )
    request.units.set(units.values())
    audit_write(
        [
            audit_event(
                actor=actor,
                action="change_request_submit",
                obj_type="changerequest",
                obj_id=request.pk,
                obj_repr=f"#{request.pk} {top.path}",
                before=None,
                after={"changes": request.changes},
                reason=reason,
                unit_path=top.path,
            )
        ]
    )
    _mail_on_commit(
        request,
        "submitted",
        approvers(top, inclusive=top.pk not in units),
        f"{actor.get_username()} asks for a quota change on {top.path}. Only someone above every unit it "
        "changes may approve it.",
    )
    return request


@transaction.atomic
def change_request_approve(*, actor: Viewer, request: ChangeRequest, comment: str = "") -> ChangeRequest:
    """Apply a pending request as it was asked, or refuse it as stale; never half of it.

    Locks the request row, so two approvals of the same request apply it once. Raises
    NotAllowedError when the actor may not approve it, InputError when it is not pending.
    """
    actor = signed_in(actor)
    comment = clean_text("comment", comment, required=False)
    request = _locked_pending(request, actor)
    if settings.ALLOT_REQUESTS_SECOND_PERSON and request.requested_by_id == actor.pk:
        raise NotAllowedError(
            f"you asked for request #{request.pk}: another lead above {request.unit.path} (or a platform admin) "
            "approves it — four eyes (ALLOT_REQUESTS_SECOND_PERSON); you may withdraw it by rejecting it"
        )
    quotas, budgets = _split([as_change(c) for c in request.changes])
    why = f"change request #{request.pk}: {request.reason}"
    before = _frozen(request)  # what it read as before anything is applied: kept with the decision
    try:
        with transaction.atomic():
            if quotas:
                quota_set_bulk(actor=actor, reason=why, changes=quotas)
            if budgets:
                budget_set_bulk(actor=actor, reason=why, changes=budgets)
    except InputError as exc:  # a budget item no longer parses (a tier was removed meanwhile)
        _decide(request, actor, ChangeRequestStatus.STALE, comment, {"detail": f"{exc}. Make a new request."}, before)
    except StaleVersionError as exc:
        _decide(
            request,
            actor,
            ChangeRequestStatus.STALE,
            comment,
            {"detail": f"{exc}. Make a new request from the current values.", "current": exc.current},
            before,
        )
    except PolicyViolationError as exc:
        _decide(
            request,
            actor,
            ChangeRequestStatus.STALE,
            comment,
            {
                "detail": "it would now break the quota policy: " + "; ".join(v.message for v in exc.violations),
                "violations": [v.as_dict() for v in exc.violations],
            },
            before,
        )
    else:
        _decide(request, actor, ChangeRequestStatus.APPLIED, comment, {}, before)
    return request


@transaction.atomic
def change_request_reject(*, actor: Viewer, request: ChangeRequest, comment: str) -> ChangeRequest:
    actor = signed_in(actor)
    if not (comment.strip() if isinstance(comment, str) else comment):
        raise InputError("comment", "a comment is required to reject", "tell the requester why")
    comment = clean_text("comment", comment, required=True)
    request = _locked_pending(request, actor)
    _decide(request, actor, ChangeRequestStatus.REJECTED, comment, {})
    return request


def _locked_pending(request: ChangeRequest, actor: User) -> ChangeRequest:
    locked = ChangeRequest.objects.select_for_update().select_related("unit", "requested_by").get(pk=request.pk)
    units = request_units(locked)
    if not may_approve_all(actor, units):
        paths = ", ".join(u.path for u in units)
        raise NotAllowedError(
            f"only a lead of a unit above every unit this request changes ({paths}), or a platform admin, may decide"
        )
    if locked.status != ChangeRequestStatus.PENDING:
        raise InputError(
            "status", f"request #{locked.pk} is {locked.get_status_display().lower()} already", "nothing to decide"
        )
    return locked


def _frozen(request: ChangeRequest) -> list[Any]:
    """The request's lines as JSON, to keep in its outcome when it is decided (read before applying)."""
    return [
        [line.unit_path, line.flavor, line.resource.value if line.resource else None, [list(f) for f in line.fields]]
        for line in request_lines(request)
    ]


def _decide(
    request: ChangeRequest,
    actor: User,
    status: str,
    comment: str,
    outcome: dict[str, Any],
    lines: list[Any] | None = None,
) -> None:
    outcome = {**outcome, "lines": lines if lines is not None else _frozen(request)}
    request.status, request.decided_by, request.decided_at = status, actor, timezone.now()
    request.decision_comment, request.outcome = comment, outcome
    request.save()
    audit_write(
        [
            audit_event(
                actor=actor,
                action=f"change_request_{status}",
                obj_type="changerequest",
                obj_id=request.pk,
                obj_repr=f"#{request.pk} {request.unit.path}",
                before={"status": ChangeRequestStatus.PENDING.value},
                after={"status": status, **({"outcome": outcome} if outcome else {})},
                reason=comment or f"change request #{request.pk} {status}",
                unit_path=request.unit.path,
            )
        ]
    )
    word = {"applied": "approved and applied", "rejected": "rejected", "stale": "refused as stale"}[status]
    detail = outcome.get("detail", "") if outcome else ""
    said = f' Their comment: "{comment}".' if comment else ""
    _mail_on_commit(
        request,
        word,
        [request.requested_by, actor],
        f"{actor.get_username()} {word} change request #{request.pk} on {request.unit.path}.{said} {detail}".strip(),
    )


def _mail_on_commit(request: ChangeRequest, what: str, people: Sequence[Any], body: str) -> None:
    """A mail in plain sentences: who did what, every item current → proposed, what it would break if
    applied now (while pending), the reason, and the request's page."""
    emails = sorted({p.email for p in people if getattr(p, "email", "")})
    if not emails:
        return
    subject = f"[Allot] change request #{request.pk} on {request.unit.path} {what}"
    items = "\n".join(f"  - {line.sentence()}" for line in request_lines(request))
    basis = "now" if request.status == ChangeRequestStatus.PENDING else "when decided"
    text = f"{body}\n\nWhat it changes ({basis} → asked):\n{items}\n\nReason given: {request.reason}\n"
    if request.status == ChangeRequestStatus.PENDING:
        problems = request_violations(request)
        text += (
            "\nIf it were applied now it would break the quota policy:\n"
            + "\n".join(f"  - {v.message}" for v in problems)
            + "\n"
            if problems
            else "\nIt fits the quota policy as it stands now.\n"
        )
    text += f"\nSee it and decide: {portal_link(f'/requests/{request.pk}/')}\n"
    transaction.on_commit(lambda: send_mail(subject, text, None, emails, fail_silently=True))
