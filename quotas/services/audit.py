"""Audit rows, written by services inside their own transaction.

Writing them sends :data:`audit_written`; enforcement listens (connected once at start-up in
``quotas.apps``), so the audit writer does not import what it sets off."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.dispatch import Signal
from django.utils import timezone

from quotas.errors import InputError, clean_text
from quotas.models import AuditEvent

Actor = AbstractBaseUser | AnonymousUser | None
audit_written = Signal()
"""Sent with ``events``: the rows just written (a policy change reaches the clusters by itself)."""


def require_reason(reason: str) -> str:
    """The reason of a change, stripped; InputError when it is missing, not text, too long or holds a
    control character."""
    if not (reason.strip() if isinstance(reason, str) else reason):
        raise InputError("reason", "a reason is required", "say in a sentence why this change is made")
    return clean_text("reason", reason, required=True)


def audit_event(
    *,
    actor: Actor,
    action: str,
    obj_type: str,
    obj_id: object,
    obj_repr: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    reason: str,
    unit_path: str = "",
) -> AuditEvent:
    """An unsaved audit row; pass a list of them to :func:`audit_write`."""
    user = actor if isinstance(actor, User) and actor.is_authenticated else None
    return AuditEvent(
        at=timezone.now(),
        actor=user,
        actor_name=user.get_username() if user else "system",
        action=action,
        object_type=obj_type,
        object_id=str(obj_id),
        object_repr=obj_repr[:300],
        unit_path=unit_path,
        before=before,
        after=after,
        reason=reason,
    )


def audit_write(events: list[AuditEvent]) -> list[AuditEvent]:
    written = AuditEvent.objects.bulk_create(events)
    audit_written.send(sender=AuditEvent, events=written)
    return written


def changed_fields(obj: object, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Set ``values`` on ``obj``; return (before, after) of the fields that really changed."""
    before, after = {}, {}
    for field, value in values.items():
        old = getattr(obj, field)
        if old != value:
            before[field], after[field] = plain(old), plain(value)
            setattr(obj, field, value)
    return before, after


def plain(value: Any) -> Any:
    """A value as an audit row stores it: JSON types as they are, objects and the rest as text."""
    if hasattr(value, "pk"):
        return str(value)
    if value is None or isinstance(value, (bool, int, str, list, dict)):
        return value
    return str(value)
