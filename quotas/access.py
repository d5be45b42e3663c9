"""Who may do what, per unit. One place, used by pages, the API and the services.

Roles come from the tree itself: a platform admin is a staff user; a department head or team lead
is a lead of that unit. Leading a unit makes you responsible for what is *inside* it:

* you may set quotas of units strictly below the units you lead, directly — a team lead moves
  guarantee between the team's projects, a department head between its teams;
* for the unit you lead itself (its envelope) you may only ask: a change request, approved by a
  lead of a unit above it (the department head), or a platform admin above the department;
* a change request may touch units in several subtrees (a lead of teams in two departments): only
  someone above *every* unit it changes may approve it — the lead of a common ancestor, or a
  platform admin — never the head of one of the departments (that would let one head change
  another's team);
* everyone signed in may read the tree, quotas and history; a change request (its reason and
  decision) only whoever asked, the leads of a unit it changes or above, and platform admins.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db.models import Q, QuerySet

from quotas.models import AuditEvent, ChangeRequest, OrgUnit

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


def cost_readable_paths(user: Viewer) -> list[str] | None:
    """The unit paths whose costs ``user`` may read, for filtering lists (a review, its files): None
    means every path (visibility ``everyone``, or a platform admin); else the units they lead, each
    with everything below it. The same rule as :func:`may_read_costs`."""
    from django.conf import settings

    if settings.ALLOT_SHOWBACK_VISIBILITY == "everyone" or is_platform_admin(user):
        return None if getattr(user, "is_authenticated", False) else []
    return led_paths(user)


def may_set_directly(user: Viewer, unit: OrgUnit, led: list[str] | None = None) -> bool:
    return is_platform_admin(user) or _within(unit.path, led_paths(user) if led is None else led, strictly=True)


def may_request(user: Viewer, unit: OrgUnit, led: list[str] | None = None) -> bool:
    return is_platform_admin(user) or _within(unit.path, led_paths(user) if led is None else led, strictly=False)


def may_approve_all(user: Viewer, units: Iterable[OrgUnit], led: list[str] | None = None) -> bool:
    """Approve a change request that changes ``units``: a lead strictly above every one of them, or a
    platform admin."""
    if is_platform_admin(user):
        return True
    led = led_paths(user) if led is None else led
    found = list(units)
    return bool(found) and all(_within(u.path, led, strictly=True) for u in found)


def request_units(request: ChangeRequest) -> list[OrgUnit]:
    """The units a change request changes (``prefetch_related("units")`` reads a page of them at once)."""
    return sorted(request.units.all(), key=lambda u: u.path)


def may_decide(user: Viewer, request: ChangeRequest, led: list[str] | None = None) -> bool:
    """Approve or reject ``request``: :func:`may_approve_all` of the units it changes."""
    return may_approve_all(user, request_units(request), led)


def waiting_for(user: Viewer) -> list[ChangeRequest]:
    """Pending change requests ``user`` may decide, oldest first — not their own where a second person
    approves (ALLOT_REQUESTS_SECOND_PERSON): what the badge on every page counts."""
    if user is None or not user.is_authenticated:
        return []
    led = led_paths(user)  # once, not once per pending request
    if not led and not is_platform_admin(user):
        return []
    pending = (
        ChangeRequest.objects.filter(status="pending")
        .select_related("unit", "requested_by")
        .prefetch_related("units")
        .order_by("created_at", "pk")
    )
    if settings.ALLOT_REQUESTS_SECOND_PERSON:
        pending = pending.exclude(requested_by_id=user.pk)
    return [r for r in pending if may_decide(user, r, led)]


def may_read_request(user: Viewer, request: ChangeRequest, led: list[str] | None = None) -> bool:
    """A change request, its reason and its decision: whoever asked, platform admins, and the leads of
    any unit it changes or of a unit above one. The API's list and the portal ask this rule (the
    list as :func:`readable_requests`)."""
    if not getattr(user, "is_authenticated", False):
        return False
    if is_platform_admin(user) or request.requested_by_id == getattr(user, "pk", None):
        return True
    led = led_paths(user) if led is None else led
    return any(_within(u.path, led, strictly=False) for u in request_units(request))


def readable_requests(user: Viewer) -> QuerySet[ChangeRequest]:
    """:func:`may_read_request` as one query."""
    if not getattr(user, "is_authenticated", False):
        return ChangeRequest.objects.none()
    if is_platform_admin(user):
        return ChangeRequest.objects.all()
    rule = Q(requested_by_id=getattr(user, "pk", None))
    for path in led_paths(user):
        rule |= Q(units__path=path) | Q(units__path__startswith=f"{path}/")
    return ChangeRequest.objects.filter(pk__in=ChangeRequest.objects.filter(rule).values("pk"))


def common_unit(units: Iterable[OrgUnit]) -> OrgUnit | None:
    """The lowest unit that is, or is above, every one of ``units`` (None across organisations)."""
    found = list(units)
    if not found:
        return None
    parts = [u.path.split("/") for u in found]
    common: list[str] = []
    for segments in zip(*parts, strict=False):
        if len(set(segments)) != 1:
            break
        common.append(segments[0])
    if not common:
        return None
    path = "/".join(common)
    return (
        next((u for u in found if u.path == path), None)
        or OrgUnit.objects.filter(path=path, archived_at__isnull=True).first()
    )


def approvers(unit: OrgUnit, *, inclusive: bool = False) -> list[User]:
    """Who should hear of a request on ``unit``: the leads of the nearest unit above it that has
    leads (``inclusive``: ``unit`` itself counts — it is above every unit the request changes);
    platform admins when no unit above has any."""
    node = unit if inclusive else unit.parent
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


def within_any(field: str, paths: Iterable[str]) -> Q:
    """Rows whose unit path ``field`` is one of ``paths`` or below one (none: no row)."""
    from quotas.selectors import subtree

    found = Q(pk__in=[])
    for path in paths:
        found |= subtree(field, path)
    return found


def readable_audit(user: Viewer, events: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
    """The audit trail's one read rule: an event is readable by whoever may read what it records.
    Policy (quotas, units, members, bindings, clusters, flavors, contracts, tiers, syncs) is
    everyone's, like the tree; a change request's events only for those who may read the request
    (:func:`may_read_request`); findings and reviews only for those who may read the unit's costs
    (:func:`may_read_costs`); sign-in lockouts (a username and an address) and people added (an
    email address) only platform admins.
    Every surface that shows the audit (the API, the unit page, History) asks this."""
    if is_platform_admin(user):
        return events
    if not getattr(user, "is_authenticated", False):
        return events.none()
    requests = [str(pk) for pk in readable_requests(user).values_list("pk", flat=True)]
    hidden = (Q(object_type="changerequest") & ~Q(object_id__in=requests)) | Q(object_type__in=("signin", "user"))
    paths = cost_readable_paths(user)
    if paths is not None:
        hidden |= Q(object_type__in=("finding", "review")) & ~within_any("unit_path", paths)
    return events.exclude(hidden)
