"""Who may do what, per unit. One place, used by pages, the API and the services.

Roles come from the tree itself: a platform admin is a staff user; a department head or team lead
is a lead of that unit. Leading a unit makes you responsible for what is *inside* it:

* you may set quotas of units strictly below the units you lead, directly — a team lead moves
  guarantee between the team's projects, a department head between its teams;
* for the unit you lead itself (its envelope) you may only ask: a change request, approved by a
  lead of a unit above it (the department head), or a platform admin above the department;
* everyone signed in may read.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User

from quotas.models import OrgUnit

Viewer = User | AbstractBaseUser | AnonymousUser | None


class NotAllowedError(Exception):
    """The actor may not do this; the message says who may."""


def is_platform_admin(user: Viewer) -> bool:
    return bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False))


def led_paths(user: Viewer) -> list[str]:
    if not isinstance(user, User) or not user.is_authenticated:
        return []
    return list(OrgUnit.objects.filter(leads=user, archived_at__isnull=True).values_list("path", flat=True))


def _within(path: str, led: list[str], *, strictly: bool) -> bool:
    return any(path.startswith(f"{p}/") or (not strictly and path == p) for p in led)


def may_read_costs(user: Viewer, path: str, led: list[str] | None = None) -> bool:
    """Showback and findings of ``path`` (and below): everyone signed in, like the tree, unless
    ALLOT_SHOWBACK_VISIBILITY=leads — then platform admins, and leads of it or a unit above it."""
    from django.conf import settings

    if settings.ALLOT_SHOWBACK_VISIBILITY == "everyone":
        return bool(getattr(user, "is_authenticated", False))
    if is_platform_admin(user):
        return True
    return bool(path) and _within(path, led_paths(user) if led is None else led, strictly=False)


def may_set_directly(user: Viewer, unit: OrgUnit, led: list[str] | None = None) -> bool:
    return is_platform_admin(user) or _within(unit.path, led_paths(user) if led is None else led, strictly=True)


def may_request(user: Viewer, unit: OrgUnit, led: list[str] | None = None) -> bool:
    return is_platform_admin(user) or _within(unit.path, led_paths(user) if led is None else led, strictly=False)


def may_approve(user: Viewer, unit: OrgUnit, led: list[str] | None = None) -> bool:
    """Approve a change to ``unit``'s envelope: a lead strictly above it, or a platform admin."""
    return may_set_directly(user, unit, led)


def approvers(unit: OrgUnit) -> list[User]:
    """Who should hear of a request on ``unit``: the leads of the nearest unit above it that has
    leads; platform admins when no unit above has any."""
    node = unit.parent
    while node is not None:
        leads = list(node.leads.filter(is_active=True))
        if leads:
            return leads
        node = node.parent
    return list(User.objects.filter(is_staff=True, is_active=True))


def signed_in(user: Viewer) -> User:
    """The acting user of a person's request; NotAllowedError for anyone not signed in."""
    if not isinstance(user, User) or not user.is_authenticated:
        raise NotAllowedError("sign in first")
    return user
