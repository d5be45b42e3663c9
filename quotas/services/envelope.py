"""Above the envelope, from the same form (issue #42): a lead's direct change that the envelope they lead
cannot hold becomes one change request — their change plus each envelope above it raised just enough,
as far up as they may ask. Reads only; the request itself is ``change_request_submit``.

An envelope raised keeps its ceiling where it was (its burst lowered by the raise, never below 0), so
the raise asks for guarantee, not for more borrowing; what the raises cannot fix (a department with
no room left that the lead may not ask for) is said with who decides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from quotas.access import Viewer, may_request
from quotas.models import OrgUnit, Quota
from quotas.policy import snapshot as snap
from quotas.policy.invariants import check_quota_edits
from quotas.policy.quantity import Resource, format_quantity
from quotas.policy.violations import Violation, ViolationCode
from quotas.selectors import flavor_keys, org_snapshot
from quotas.services.quota import QuotaChange, proposed_quota

Key = tuple[int, str, Resource]


@dataclass(frozen=True)
class EnvelopeOffer:
    """The change request a failing direct change could be sent as."""

    changes: list[QuotaChange]
    """The person's changes, then each envelope raised (with the version it was read at)."""
    raises: list[str]
    """Each raise as people say it: "nlp's A100-80GB guarantee 30 → 34"."""
    remaining: list[Violation]
    """What the request would still break (with who decides it): empty when it could be approved."""


def envelope_offer(actor: Viewer, changes: Sequence[QuotaChange]) -> EnvelopeOffer | None:
    """``changes`` plus the envelope raises that make their parents' children fit, or None when no
    envelope above them is too small (the violations are of another kind: nothing to offer)."""
    snapshot = org_snapshot()
    keys = flavor_keys()
    ids = {key: fid for fid, key in keys.items()}
    edits: dict[Key, snap.Quota] = {
        (c.unit_id, keys[c.flavor_id], c.resource): proposed_quota(
            c, snapshot.quotas.get((c.unit_id, keys[c.flavor_id], c.resource))
        )
        for c in changes
    }
    by_path = {u.path: uid for uid, u in snapshot.units.items()}
    allowed = {u.pk: may_request(actor, u) for u in OrgUnit.objects.filter(pk__in=snapshot.units)}
    raised: list[Key] = []
    for _ in range(len(snapshot.units)):  # each pass raises the next envelope up; the tree is finite
        short = [
            v
            for v in check_quota_edits(snapshot, edits)
            if v.code == ViolationCode.CHILDREN_EXCEED_GUARANTEE
            and allowed.get(by_path.get(v.unit or "", -1), False)
            and v.actual is not None
        ]
        if not short:
            break
        for v in short:
            key = (by_path[v.unit or ""], v.flavor or "", Resource(str(v.resource)))
            now = edits.get(key) or snapshot.quotas.get(key) or snap.Quota(0, 0, 0)
            guarantee = int(v.actual or 0)
            edits[key] = replace(now, guarantee=guarantee, burst=max(0, now.guarantee + now.burst - guarantee))
            if key not in raised:
                raised.append(key)
    if not raised:
        return None
    versions = {
        (q.unit_id, q.flavor_id, q.resource): q.version
        for q in Quota.objects.filter(unit_id__in={k[0] for k in raised})
    }
    extra, said = [], []
    for key in raised:
        uid, flavor, resource = key
        before, after = snapshot.quotas.get(key) or snap.Quota(0, 0, 0), edits[key]
        fid = ids[flavor]
        version = versions.get((uid, fid, resource.value), 0)
        extra.append(QuotaChange(uid, fid, resource, after.guarantee, after.burst, None, version))
        g0, g1, b0, b1 = (
            format_quantity(resource, n) for n in (before.guarantee, after.guarantee, before.burst, after.burst)
        )
        burst = f" (burst {b0} → {b1}, the same ceiling)" if after.burst != before.burst else ""
        said.append(f"{snapshot.units[uid].path}'s {flavor} guarantee {g0} → {g1}{burst}")
    remaining = [who_decides(v) for v in check_quota_edits(snapshot, edits)]
    return EnvelopeOffer([*changes, *extra], said, remaining)


def who_decides(v: Violation) -> Violation:
    """A department without room the lead may not ask for: say whose it is to give, not "make a change
    request" (the request is what they were making)."""
    if v.code != ViolationCode.CHILDREN_EXCEED_GUARANTEE or v.limit is None or v.actual is None:
        return v
    resource = Resource(str(v.resource))
    return replace(
        v,
        hint=f"{v.unit} has {format_quantity(resource, v.limit)} to share and this would need "
        f"{format_quantity(resource, v.actual)}: its leads decide how it is shared — ask them to free "
        f"{format_quantity(resource, v.actual - v.limit)} inside {v.unit} or to ask for more for {v.unit} itself",
    )
