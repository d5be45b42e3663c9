"""What an approver has in view while deciding a pending change request: for each quota it changes,
what the unit holds now and the room left under the level above (now and once approved), and per
cluster the exact objects approval would change (the preview the quota form shows its editor).
Other apps add their own parts (their usage of the units) through quotas.portal.panels."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from quotas.models import ChangeRequest, OrgUnit
from quotas.policy.headroom import guarantee_room
from quotas.policy.quantity import Resource, format_quantity
from quotas.policy.snapshot import ZERO
from quotas.portal.panels import request_panels
from quotas.previews import quota_change_preview
from quotas.selectors import allocations, flavor_keys, org_snapshot
from quotas.services.quota import proposed_quota
from quotas.services.request_items import quota_items


def decision_context(request: HttpRequest, change_request: ChangeRequest) -> dict[str, Any]:
    """The page's "Before you decide" part, for a pending request (empty for budget-only ones)."""
    items = quota_items(change_request.changes)
    units = {u.pk: u for u in OrgUnit.objects.filter(pk__in={c.unit_id for c in items}, archived_at__isnull=True)}
    keys = flavor_keys()
    items = [c for c in items if c.unit_id in units and c.flavor_id in keys]  # else approval refuses it
    if not items:
        return request_panels(request, change_request, [])
    snapshot = org_snapshot()
    edits = {}
    for c in items:
        key = (c.unit_id, keys[c.flavor_id], c.resource)
        edits[key] = proposed_quota(c, snapshot.quotas.get(key))
    held = allocations()
    standing = []
    for room in guarantee_room(snapshot, edits):
        key = (room.unit_id, room.flavor, room.resource)
        before, after = snapshot.quotas.get(key, ZERO), edits[key]
        standing.append(
            {
                "unit": units[room.unit_id],
                "flavor": room.flavor,
                "what": room.resource,
                "held": _shown(room.resource, held.get((room.unit_id, room.flavor, room.resource.value))),
                "guarantee": (_shown(room.resource, before.guarantee), _shown(room.resource, after.guarantee)),
                "ceiling": (_shown(room.resource, before.ceiling), _shown(room.resource, after.ceiling)),
                "holder": room.holder,
                "of": _shown(room.resource, room.of),
                "room": (_shown(room.resource, room.now), _shown(room.resource, room.after)),
                "short": room.after is not None and room.after < 0,
            }
        )
    return {
        "standing": standing,
        "preview": quota_change_preview(items, snapshot),
        **request_panels(
            request, change_request, [(c.unit_id, c.flavor_id) for c in items if c.resource is Resource.GPU]
        ),
    }


def _shown(resource: Resource, value: int | None) -> str:
    return "—" if value is None else format_quantity(resource, value)
