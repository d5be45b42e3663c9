"""Accepting a review's recommendations: one (as a change request) or the whole plan, by the leads of
the recommendation's unit or above, audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from quotas.models import OrgUnit, Quota


def _may_accept(actor: Any, unit: Any, rec: dict[str, Any]) -> None:
    """Leads of the recommendation's unit or above (or of the review's unit), and platform admins."""
    from quotas.access import NotAllowedError, may_request

    target = OrgUnit.objects.filter(path=rec.get("unit_path"), archived_at__isnull=True).first() or unit
    if not (getattr(actor, "is_authenticated", False) and may_request(actor, target)):
        raise NotAllowedError(f"you lead neither {target.path} nor a unit above it: ask its lead to accept this")


@transaction.atomic
def review_accept(*, actor: Any, review: Any, index: int, reason: str = "") -> Any:
    """Turn recommendation ``index`` of a stored review into a change request (approved through the
    usual flow) and record it on the review; audited. A recommendation accepted already returns its
    request."""
    from accounting.models import Review
    from accounting.services.finding_actions import request_suggested_change
    from quotas.errors import InputError

    review = Review.objects.select_for_update().select_related("unit").get(pk=review.pk)
    if not 0 <= index < len(review.recommendations):
        raise InputError(
            "index", f"review #{review.pk} has {len(review.recommendations)} recommendations", "pick one of them"
        )
    rec = review.recommendations[index]
    _may_accept(actor, review.unit, rec)  # before anything is answered, accepted already or not
    if rec.get("change_request"):
        from quotas.models import ChangeRequest

        return ChangeRequest.objects.get(pk=rec["change_request"])
    action = rec.get("action")
    if not action:
        raise InputError(
            "index", f"{rec['unit_path']} {rec['flavor']}: the review says {rec['verdict']}", "nothing to request"
        )
    today = Quota.objects.filter(unit_id=action["unit"], flavor_id=action["flavor"], resource="nvidia.com/gpu").first()
    if today and (today.guarantee, today.burst, today.lendable) == tuple(
        action[k] for k in ("guarantee", "burst", "lendable")
    ):
        raise InputError(
            "index", f"{rec['unit_path']} {rec['flavor']}: its quota is in force already", "nothing to request"
        )
    if rec.get("needs"):
        raise InputError(
            "index",
            f"{rec['unit_path']} {rec['flavor']} ({rec['verdict']}) breaks the invariants on its own: it needs "
            f"recommendations {', '.join(map(str, rec['needs']))}, which make room for it",
            "accept the whole plan (one change request)",
        )
    why = (reason.strip() + " — " if reason.strip() else "") + (
        f"governance review {review.unit.path} {review.month}: {rec['verdict']} — {rec['evidence']}"
    )
    request = request_suggested_change(actor=actor, action=action, reason=why)
    recommendations = list(review.recommendations)
    recommendations[index] = {**rec, "change_request": request.pk}
    review.recommendations = recommendations
    review.save(update_fields=["recommendations"])
    after = {"change_request": request.pk, "verdict": rec["verdict"]}
    _audit_accept(actor, review, "review_accept", f"#{index}", after, why, rec["unit_path"])
    return request


def _audit_accept(actor: Any, review: Any, action: str, what: str, after: dict[str, Any], why: str, path: str) -> None:
    """The audit row of a review's recommendation (or plan) turned into a change request."""
    from quotas.services.audit import audit_event, audit_write

    audit_write(
        [
            audit_event(
                actor=actor, action=action, obj_type="review", obj_id=review.pk,
                obj_repr=f"{review.unit.path} {review.month} {what}", before=None, after=after, reason=why[:500],
                unit_path=path,
            )
        ]
    )  # fmt: skip


@transaction.atomic
def review_accept_plan(*, actor: Any, review: Any, reason: str = "") -> Any:
    """The review's whole plan as one change request (``accounting.services.plan.plan_accept``, decided
    by someone above every unit it changes and applied atomically); recorded on the review, audited."""
    from accounting.models import Review
    from accounting.services.plan import plan_accept

    review = Review.objects.select_for_update().select_related("unit").get(pk=review.pk)
    earlier = review.summary.get("plan_change_request")
    if earlier:  # accepted already (a second click, another head): that request, checked like a new one
        from quotas.access import NotAllowedError, may_read_request
        from quotas.models import ChangeRequest

        found = ChangeRequest.objects.filter(pk=earlier).first()
        if found is not None:
            if not may_read_request(actor, found):
                raise NotAllowedError(f"you lead neither {review.unit.path} nor a unit above it")
            return found
    request = plan_accept(actor=actor, unit=review.unit, month=review.month, reason=reason)
    review.summary = {**review.summary, "plan_change_request": request.pk}
    review.save(update_fields=["summary"])
    after = {"change_request": request.pk, "items": len(request.changes)}
    _audit_accept(actor, review, "review_accept_plan", "plan", after, request.reason, review.unit.path)
    return request
