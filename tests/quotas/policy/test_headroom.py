"""The room left under the level above, now and with a change applied (quotas.policy.headroom): what an
approver reads beside a change request. Hand-checked on the invariants' tree."""

from quotas.policy import Quota, Resource
from quotas.policy.headroom import guarantee_room
from quotas.policy.invariants import check_quota_edits
from tests.quotas.policy.test_invariants import GPU, F, tree


def test_a_team_raised_takes_its_room_from_its_department():
    b, u = tree()  # ml 60: nlp 30 + vision 20 given, 10 left
    [room] = guarantee_room(b.build(), {(u["nlp"], F, GPU): Quota(34, 10, 15)})
    assert (room.holder, room.of, room.now, room.after) == ("acme/ml", 60, 10, 6)


def test_siblings_changed_together_are_counted_together_and_a_parent_raised_with_them():
    b, u = tree()
    snapshot = b.build()
    edits = {(u["nlp"], F, GPU): Quota(36, 10, 15), (u["vision"], F, GPU): Quota(26, 10, 10)}
    rooms = guarantee_room(snapshot, edits)
    assert [(r.now, r.after) for r in rooms] == [(10, -2), (10, -2)]  # 62 of 60: short by 2 …
    assert check_quota_edits(snapshot, edits)  # … which the invariants refuse too
    edits[(u["ml"], F, GPU)] = Quota(62, 18, 60)  # the department grows by 2 in the same change
    by_unit = {r.unit_id: r for r in guarantee_room(snapshot, edits)}
    assert (by_unit[u["nlp"]].of, by_unit[u["nlp"]].after) == (62, 0)
    assert not check_quota_edits(snapshot, edits)
    # the department's own room is under acme (100: ml 60 + ops 30): 10 now, 8 once it grows
    assert (by_unit[u["ml"]].holder, by_unit[u["ml"]].now, by_unit[u["ml"]].after) == ("acme", 10, 8)


def test_a_top_level_unit_takes_its_room_from_the_flavors_reclaimable_capacity():
    b, u = tree()  # 120 physical − 10 reserved − 10 headroom = 100, all promised to acme
    [room] = guarantee_room(b.build(), {(u["acme"], F, GPU): Quota(90)})
    assert (room.holder, room.of, room.now, room.after) == ("", 100, 0, 10)


def test_a_resource_without_a_declared_capacity_has_no_room_at_the_top():
    b, u = tree()
    [room] = guarantee_room(b.build(), {(u["acme"], F, Resource.CPU): Quota(4000)})
    assert (room.of, room.now, room.after) == (None, None, None)
