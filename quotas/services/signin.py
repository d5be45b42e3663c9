"""Sign-in throttling (django-axes) in the audit trail: each lockout is recorded when it happens, and a
platform admin's unlock is a service with a reason, like every other change."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from quotas.access import NotAllowedError, is_platform_admin

from .audit import Actor, audit_event, audit_write, require_reason


def record_lockout(*, username: str, ip_address: str) -> None:
    """Called by django-axes' ``user_locked_out`` signal (quotas/apps.py), which fires again on each
    attempt while paused: one row per lockout (none while the same one is still running)."""
    from django.conf import settings
    from django.utils import timezone

    from quotas.models import AuditEvent

    recent = AuditEvent.objects.filter(
        action__in=("signin_locked_out", "signin_unlock"),
        object_type="signin",
        object_id=username or "-",
        at__gte=timezone.now() - settings.AXES_COOLOFF_TIME,
    ).order_by("-at", "-id")
    last = recent.first()
    if last is not None and last.action == "signin_locked_out" and (last.after or {}).get("ip_address") == ip_address:
        return
    audit_write(
        [
            audit_event(
                actor=None,
                action="signin_locked_out",
                obj_type="signin",
                obj_id=username or "-",
                obj_repr=f"{username or '(no username)'} from {ip_address}",
                before=None,
                after={"username": username, "ip_address": ip_address},
                reason="too many failed sign-ins",
            )
        ]
    )


@transaction.atomic
def signin_unlock(*, actor: Actor, reason: str, username: str, ip_address: str = "") -> int:
    """Lift the lockout of ``username`` (from ``ip_address`` only, when given). Returns how many
    lockout records were removed; NotAllowedError for anyone but a platform admin."""
    from axes.utils import reset

    if not is_platform_admin(actor):
        raise NotAllowedError("only a platform admin may lift a sign-in lockout")
    reason = require_reason(reason)
    removed = reset(username=username, ip=ip_address or None)
    audit_write(
        [
            audit_event(
                actor=actor,
                action="signin_unlock",
                obj_type="signin",
                obj_id=username,
                obj_repr=f"{username}" + (f" from {ip_address}" if ip_address else ""),
                before={"lockout_records": removed},
                after={"lockout_records": 0},
                reason=reason,
            )
        ]
    )
    return removed


def lockouts() -> list[dict[str, Any]]:
    """Current lockouts and near-lockouts: username, address, failures, whether paused, last attempt."""
    from axes.models import AccessAttempt
    from django.conf import settings

    return [
        {
            "username": a.username,
            "ip_address": a.ip_address,
            "failures": a.failures_since_start,
            "locked": a.failures_since_start >= settings.AXES_FAILURE_LIMIT,
            "last_attempt": a.attempt_time,
        }
        for a in AccessAttempt.objects.order_by("-attempt_time")
    ]
