"""Properties: accepted edits keep every invariant, and the incremental check agrees with a full
re-validation on every edit, accepted or refused."""

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from quotas.policy import OrgSnapshot, Quota, Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.invariants import check_move, check_quota_edits, validate_tree

FLAVORS = ("c/a100", "c/v100")
RESOURCES = (Resource.GPU, Resource.CPU)
KINDS = (UnitKind.ORGANISATION, UnitKind.DEPARTMENT, UnitKind.TEAM, UnitKind.PROJECT)


@st.composite
def trees(draw) -> OrgSnapshot:
    """A random valid tree: 1–2 organisations, up to 14 units, quotas all 0 (trivially valid)."""
    b = TreeBuilder()
    for key in FLAVORS:
        devices = draw(st.integers(0, 64))
        b.flavor(key, devices, headroom=draw(st.integers(0, min(4, devices))))
    b.flavors = {k: replace(f, capacity={Resource.CPU: draw(st.integers(0, 500))}) for k, f in b.flavors.items()}
    roots = [b.unit(f"org{i}", UnitKind.ORGANISATION) for i in range(draw(st.integers(1, 2)))]
    for i in range(draw(st.integers(0, 12))):
        parent = draw(st.sampled_from(sorted(b.units)))
        rank = b.units[parent].kind.rank
        kind = KINDS[min(3, rank + draw(st.integers(0, 1)) if rank else 1)]
        b.unit(f"u{i}", kind, parent)
    assert roots
    return b.build()


edits = st.lists(
    st.tuples(
        st.integers(1, 14),
        st.sampled_from(FLAVORS),
        st.sampled_from(RESOURCES),
        st.integers(-2, 40),
        st.integers(-1, 20),
        st.integers(0, 40),
    ),
    min_size=1,
    max_size=3,
)


def _quota_violations(snapshot: OrgSnapshot):
    return list(validate_tree(snapshot))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), steps=st.lists(edits, min_size=1, max_size=12))
def test_any_sequence_of_accepted_edits_keeps_every_invariant(tree, steps):
    snapshot = tree
    assert validate_tree(snapshot) == []
    for step in steps:
        proposal = {(u, f, r): Quota(g, b, lend) for u, f, r, g, b, lend in step if u in snapshot.units}
        if not proposal:
            continue
        refused = check_quota_edits(snapshot, proposal)
        after = replace(snapshot, quotas={**snapshot.quotas, **proposal})
        full = _quota_violations(after)
        # incremental and full agree: refused exactly when the result would be invalid
        assert bool(refused) == bool(full), (refused, full)
        event("edit refused" if refused else "edit accepted")
        if not refused:
            snapshot = after
        assert validate_tree(snapshot) == []


@settings(max_examples=200, deadline=None)
@given(
    tree=trees(),
    steps=st.lists(edits, min_size=1, max_size=6),
    moves=st.lists(st.tuples(st.integers(1, 14), st.integers(1, 14)), max_size=4),
)
def test_accepted_moves_keep_every_invariant(tree, steps, moves):
    snapshot = tree
    for step in steps:
        proposal = {(u, f, r): Quota(g, b, lend) for u, f, r, g, b, lend in step if u in snapshot.units}
        if proposal and not check_quota_edits(snapshot, proposal):
            snapshot = replace(snapshot, quotas={**snapshot.quotas, **proposal})
    for unit_id, parent_id in moves:
        if unit_id not in snapshot.units or parent_id not in snapshot.units:
            continue
        if snapshot.units[unit_id].parent_id is None:
            continue  # moving an organisation is always a kind error; covered elsewhere
        if check_move(snapshot, unit_id, parent_id):
            continue
        unit = snapshot.units[unit_id]
        moved = replace(unit, parent_id=parent_id, path=f"{snapshot.units[parent_id].path}/{unit.slug}")
        snapshot = replace(snapshot, units={**snapshot.units, unit_id: moved})
        assert validate_tree(snapshot) == []
