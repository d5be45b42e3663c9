"""What was in force at a time: the quotas and flavor prices as they stood at ``at``, read from today's rows with every
later change of the audit trail undone (each ``quota_set`` row holds the quota's id, what it was
before and what it became; every quota write goes through ``quota_set_bulk``, which writes one).

A quota created after ``at`` (its first row has no "before") is taken as it was first set: nothing
earlier is recorded, and the usage of a period before Allot held the tree (an imported or replayed
month) was governed by the terms Allot was first given. Prices the same way from ``flavor_set`` rows
(``prices_as_of``). A past period's plan, review, budgets and showback read their terms here, so
approving a change today never rewrites what a past month says.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType

from quotas.models import AuditEvent, Quota, ResourceFlavor
from quotas.policy import snapshot as snap
from quotas.policy.quantity import Resource
from quotas.selectors import flavor_keys, org_snapshot

Terms = tuple[int, int, int]
"""guarantee, burst, lendable"""


def quota_terms_as_of(at: datetime, quotas: dict[int, Terms] | None = None) -> dict[int, Terms]:
    """Quota id → (guarantee, burst, lendable) in force at ``at``: ``quotas`` (default: every quota row
    as it is now) with the changes after ``at`` undone, newest first (one query for the rows, one for
    the later changes)."""
    found = (
        dict(quotas)
        if quotas is not None
        else {pk: (g, b, lend) for pk, g, b, lend in Quota.objects.values_list("id", "guarantee", "burst", "lendable")}
    )
    later = (
        AuditEvent.objects.filter(action="quota_set", object_type="quota", at__gt=at)
        .order_by("-at", "-id")
        .values_list("object_id", "before")
    )
    for object_id, before in later.iterator(chunk_size=2000):
        if not object_id or not before:
            continue  # created after ``at``: kept as first set (see the module docstring)
        pk = int(object_id)
        if pk in found:
            found[pk] = (int(before["guarantee"]), int(before["burst"]), int(before["lendable"]))
    return found


def quotas_as_of(at: datetime) -> dict[tuple[int, int, str], Terms]:
    """(unit id, flavor id, resource) → (guarantee, burst, lendable) in force at ``at``."""
    rows = Quota.objects.values_list("id", "unit_id", "flavor_id", "resource", "guarantee", "burst", "lendable")
    keys, now = {}, {}
    for pk, unit_id, flavor_id, resource, g, b, lend in rows:
        keys[pk], now[pk] = (unit_id, flavor_id, resource), (g, b, lend)
    return {keys[pk]: terms for pk, terms in quota_terms_as_of(at, now).items()}


def org_snapshot_as_of(at: datetime | None) -> snap.OrgSnapshot:
    """The tree as it is (units, flavors, contracts, budgets) with the quotas in force at ``at``; the
    snapshot of now when ``at`` is None."""
    snapshot = org_snapshot()
    if at is None:
        return snapshot
    keys = flavor_keys()
    then = {
        (unit_id, keys[flavor_id], Resource(resource)): snap.Quota(g, b, lend)
        for (unit_id, flavor_id, resource), (g, b, lend) in quotas_as_of(at).items()
        if unit_id in snapshot.units
    }
    return replace(snapshot, quotas=MappingProxyType(then))


def prices_as_of(at: datetime, flavors: set[int] | None = None) -> dict[int, Decimal | None]:
    """Flavor id → price per device-hour in force at ``at`` (None: no price): today's prices with every
    later ``flavor_set`` change of one price to another undone, newest first. A flavor priced for the
    first time later keeps that first price, as a quota created later keeps its first numbers: nothing
    earlier is recorded, and a month's costs are what its flavors were first priced at."""
    rows = ResourceFlavor.objects.all() if flavors is None else ResourceFlavor.objects.filter(id__in=flavors)
    found: dict[int, Decimal | None] = {
        pk: price or None for pk, price in rows.values_list("id", "price_per_device_hour")
    }
    later = (
        AuditEvent.objects.filter(action="flavor_set", at__gt=at, object_id__in=[str(pk) for pk in found])
        .order_by("-at", "-id")
        .values_list("object_id", "before")
    )
    for object_id, before in later:
        value = (before or {}).get("price_per_device_hour")
        if value not in (None, "") and Decimal(str(value)):  # a price before it (not its first pricing)
            found[int(object_id)] = Decimal(str(value))
    return found
