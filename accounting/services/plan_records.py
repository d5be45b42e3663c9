"""A past month's plan as a record: which of its items are in force today, and the fact of each one's
application — when, by whom, under which change request — read from the audit trail.

The plan of a closed month is computed on the terms in force at its end (``quotas.history``), so
approving it later leaves it as it was; what changes is only whether each item is in force, which
this module says beside it (never inside the cached plan).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from accounting.policy.plan_model import Item
from quotas.models import AuditEvent, Quota
from quotas.policy.quantity import Resource
from quotas.policy.snapshot import OrgSnapshot
from quotas.selectors import flavor_keys, org_snapshot

GPU = Resource.GPU
_REQUEST = re.compile(r"^change request #(\d+):")


def in_force(mine: Sequence[tuple[int, Item]], snapshot: OrgSnapshot | None = None) -> dict[int, dict[str, Any] | None]:
    """Per plan item (numbered as in the organisation's plan: ``PlanReport.items()``): None while today's quota differs
    from the item's, else the fact of its application — ``at``, ``by``, ``change_request`` (or None
    when set directly) and ``reason`` — from the newest audit row that set the quota to the item's
    numbers (all None where the quota already had them when the month closed)."""
    snapshot = snapshot or org_snapshot()
    held = {n: i for n, i in mine if snapshot.quota(i.unit, i.flavor, GPU) == i.after}
    out: dict[int, dict[str, Any] | None] = {n: None for n, _ in mine}
    if not held:
        return out
    ids = {v: k for k, v in flavor_keys().items()}
    rows = Quota.objects.filter(
        unit_id__in={i.unit for i in held.values()}, flavor_id__in={ids[i.flavor] for i in held.values()},
        resource=GPU.value,
    ).values_list("id", "unit_id", "flavor_id")  # fmt: skip
    pk_of = {(unit, flavor): pk for pk, unit, flavor in rows}
    events: dict[str, list[AuditEvent]] = {}
    for event in AuditEvent.objects.filter(
        action="quota_set", object_type="quota", object_id__in=[str(pk) for pk in pk_of.values()]
    ).order_by("-at", "-id"):
        events.setdefault(event.object_id, []).append(event)
    for n, item in held.items():
        pk = pk_of.get((item.unit, ids[item.flavor]))
        after = (item.after.guarantee, item.after.burst, item.after.lendable)
        setter = next(
            (
                e
                for e in events.get(str(pk), [])
                if e.after and (e.after.get("guarantee"), e.after.get("burst"), e.after.get("lendable")) == after
            ),
            None,
        )
        request = _REQUEST.match(setter.reason) if setter else None
        out[n] = {
            "at": setter.at.isoformat() if setter else None,
            "by": setter.actor_name if setter else None,
            "change_request": int(request.group(1)) if request else None,
            "reason": setter.reason[:300] if setter else None,
        }
    return out
