"""The read rules of the accounting pillar's records: which findings and reviews a user may read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet

from accounting.models import Finding
from quotas.selectors import subtree


def visible_findings(user: Any) -> QuerySet[Finding]:
    """The findings ``user`` may read: all of them, or under ALLOT_SHOWBACK_VISIBILITY=leads those of
    the units they lead and below (platform admins: all). For the API and the inbox alike."""
    from quotas.access import is_platform_admin, led_paths

    rows = Finding.objects.select_related("unit", "flavor__cluster", "change_request")
    if settings.ALLOT_SHOWBACK_VISIBILITY == "leads" and not is_platform_admin(user):
        match = Q(pk__in=[])
        for path in led_paths(user):
            match |= subtree("unit__path", path)
        rows = rows.filter(match)
    return rows


def readable_reviews(user: Any) -> Any:
    """The reviews whose costs ``user`` may read (the same rule as showback)."""
    from accounting.models import Review
    from quotas.access import cost_readable_paths, within_any

    paths = cost_readable_paths(user)
    return Review.objects.all() if paths is None else Review.objects.filter(within_any("unit__path", paths))


def work_rule(user: Any) -> Q | None:
    """Which workloads ``user`` may read (their waiting explained, issue #44.5): the usage rule (everyone
    signed in, or under ALLOT_SHOWBACK_VISIBILITY=leads the units they lead and below; platform admins all),
    and always their own work and their units' (the units they are members of). None: every workload."""
    from quotas.access import cost_readable_paths, within_any
    from quotas.models import Membership

    if not getattr(user, "is_authenticated", False):
        return Q(pk__in=[])
    paths = cost_readable_paths(user)
    if paths is None:
        return None
    units = Membership.objects.filter(user=user).values_list("unit_id", flat=True)
    return within_any("unit__path", paths) | Q(owner=user.get_username()) | Q(unit_id__in=list(units))


def job_reader(user: Any) -> Callable[[int | None, str, str], bool]:
    """The work rule for jobs that are no record (Slurm jobs read from squeue), read for ``user`` once (two
    queries) and then asked per job — ``(unit id, unit path, owner)``: the usage rule on its unit, its owner (by
    username or a membership's Slurm username), and the members of its unit."""
    from quotas.access import cost_readable_paths
    from quotas.models import Membership

    if not getattr(user, "is_authenticated", False):
        return lambda _unit, _path, _owner: False
    paths = cost_readable_paths(user)
    if paths is None:
        return lambda _unit, _path, _owner: True
    units: set[int] = set()
    names = {user.get_username()}
    for unit_id, slurm_username in Membership.objects.filter(user=user).values_list("unit_id", "slurm_username"):
        units.add(unit_id)
        if slurm_username:
            names.add(slurm_username)

    def may(unit_id: int | None, unit_path: str, owner: str) -> bool:
        if unit_path and any(unit_path == p or unit_path.startswith(f"{p}/") for p in paths):
            return True
        return bool(owner and owner in names) or (unit_id is not None and unit_id in units)

    return may


def may_read_job(user: Any, unit_id: int | None, unit_path: str, owner: str) -> bool:
    """:func:`job_reader` for one job."""
    return job_reader(user)(unit_id, unit_path, owner)
