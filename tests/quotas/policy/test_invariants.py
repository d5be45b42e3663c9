"""Invariants on hand-checked trees: each violation carries the unit, flavor, resource, the numbers
and a hint; incremental checks agree with full validation."""

from quotas.policy import Quota, Resource, UnitKind, ViolationCode
from quotas.policy.builder import TreeBuilder
from quotas.policy.capacity import capacity_report, effective_ceiling, effective_ceilings, reclaimable
from quotas.policy.invariants import check_flavor_capacity, check_move, check_quota_edits, validate_tree
from quotas.policy.snapshot import Contract, Reservation, Tier

GPU = Resource.GPU
F = "west/a100"


def tree():
    """acme (100) → ml (60, burst 20) → nlp (30, b10), vision (20, b10) → nlp/llm (20); ops (30)."""
    b = TreeBuilder()
    b.flavor(F, 120, headroom=10)
    b.reservations.append(Reservation(F, "serving", 10))
    acme = b.unit("acme", UnitKind.ORGANISATION)
    ml = b.unit("ml", UnitKind.DEPARTMENT, acme)
    nlp = b.unit("nlp", UnitKind.TEAM, ml)
    vision = b.unit("vision", UnitKind.TEAM, ml)
    llm = b.unit("llm", UnitKind.PROJECT, nlp)
    ops = b.unit("ops", UnitKind.DEPARTMENT, acme)
    b.quota(acme, F, GPU, 100)
    b.quota(ml, F, GPU, 60, 20, 60)
    b.quota(nlp, F, GPU, 30, 10, 15)
    b.quota(vision, F, GPU, 20, 10, 10)
    b.quota(llm, F, GPU, 20, 10, 0)
    b.quota(ops, F, GPU, 30)
    return b, {"acme": acme, "ml": ml, "nlp": nlp, "vision": vision, "llm": llm, "ops": ops}


def test_a_valid_tree_has_no_violations():
    b, _ = tree()
    assert validate_tree(b.build()) == []


def test_children_above_parent_guarantee_names_the_numbers_and_the_fix():
    b, u = tree()
    b.quota(u["vision"], F, GPU, 35, 5, 0)
    [v] = validate_tree(b.build())
    assert v.code is ViolationCode.CHILDREN_EXCEED_GUARANTEE
    assert (v.unit, v.flavor, v.resource, v.limit, v.actual) == ("acme/ml", F, "nvidia.com/gpu", 60, 65)
    assert "65" in v.message and "60" in v.message
    assert "by 5" in v.hint


def test_child_ceiling_above_parent_ceiling():
    b, u = tree()
    b.quota(u["nlp"], F, GPU, 30, 60, 0)  # ceiling 90 > ml's 80
    [v] = validate_tree(b.build())
    assert v.code is ViolationCode.CEILING_ABOVE_PARENT
    assert (v.unit, v.limit, v.actual) == ("acme/ml/nlp", 80, 90)


def test_lendable_above_guarantee_and_negatives():
    b, u = tree()
    b.quota(u["ops"], F, GPU, 30, -1, 31)
    codes = {v.code for v in validate_tree(b.build())}
    assert codes == {ViolationCode.LENDABLE_ABOVE_GUARANTEE, ViolationCode.NEGATIVE}


def test_top_level_guarantees_must_fit_reclaimable_capacity():
    b, u = tree()
    snapshot = b.build()
    assert reclaimable(snapshot, F, GPU) == 100  # 120 physical − 10 reserved − 10 headroom
    b.quota(u["acme"], F, GPU, 101)
    [v] = validate_tree(b.build())
    assert v.code is ViolationCode.GUARANTEES_EXCEED_CAPACITY
    assert (v.limit, v.actual, v.unit) == (100, 101, None)
    assert "burst may exceed capacity" in v.hint


def test_reservations_beyond_physical_capacity():
    b, _ = tree()
    b.reservations.append(Reservation(F, "huge", 200))
    assert ViolationCode.RESERVATIONS_EXCEED_CAPACITY in {v.code for v in validate_tree(b.build())}


def test_unknown_flavor_lists_known_ones():
    b, u = tree()
    b.quota(u["ops"], "west/tpu", GPU, 1)
    [v] = validate_tree(b.build())
    assert v.code is ViolationCode.UNKNOWN_FLAVOR and F in v.hint


def test_kind_order_and_root_kind():
    b, u = tree()
    b.unit("bad", UnitKind.DEPARTMENT, u["nlp"])
    b.unit("loose", UnitKind.TEAM)
    codes = [v.code for v in validate_tree(b.build())]
    assert codes.count(ViolationCode.KIND_ORDER) == 2


def test_incremental_edit_checks_parent_siblings_and_children():
    b, u = tree()
    snapshot = b.build()
    # raising nlp to 45 breaks ml's sum (45+20 > 60); nlp's own child llm (20, b10) still fits
    found = check_quota_edits(snapshot, {(u["nlp"], F, GPU): Quota(45, 10, 0)})
    assert [v.code for v in found] == [ViolationCode.CHILDREN_EXCEED_GUARANTEE]
    # lowering nlp below its child's guarantee and ceiling breaks both, reported at nlp and llm
    found = check_quota_edits(snapshot, {(u["nlp"], F, GPU): Quota(10, 0, 0)})
    assert {(v.code, v.unit) for v in found} == {
        (ViolationCode.CHILDREN_EXCEED_GUARANTEE, "acme/ml/nlp"),
        (ViolationCode.CEILING_ABOVE_PARENT, "acme/ml/nlp/llm"),
    }
    # moving guarantee between siblings in one edit is fine
    assert (
        check_quota_edits(snapshot, {(u["nlp"], F, GPU): Quota(35, 5, 0), (u["vision"], F, GPU): Quota(25, 5, 0)}) == []
    )


def test_incremental_root_edit_checks_capacity():
    b, u = tree()
    [v] = check_quota_edits(b.build(), {(u["acme"], F, GPU): Quota(110)})
    assert v.code is ViolationCode.GUARANTEES_EXCEED_CAPACITY


def test_edit_of_unknown_unit():
    b, _ = tree()
    [v] = check_quota_edits(b.build(), {(999, F, GPU): Quota(1)})
    assert v.code is ViolationCode.UNKNOWN_UNIT


def test_move_into_own_subtree_is_a_cycle():
    b, u = tree()
    [v] = check_move(b.build(), u["ml"], u["llm"])
    assert v.code is ViolationCode.CYCLE and v.unit == "acme/ml"


def test_move_checks_the_new_parent_sum_and_ceiling():
    b, u = tree()
    # vision (20, ceiling 30) under nlp (30, ceiling 40): nlp's children would be 20 + 20 = 40 > 30
    found = check_move(b.build(), u["vision"], u["nlp"])
    assert [v.code for v in found] == [ViolationCode.CHILDREN_EXCEED_GUARANTEE]
    assert found[0].unit == "acme/ml/nlp"
    # ops (a department) under ml: kinds allow it, but ml's sum 50 + 30 > 60
    found = check_move(b.build(), u["ops"], u["ml"])
    assert [v.code for v in found] == [ViolationCode.CHILDREN_EXCEED_GUARANTEE]


def test_move_checks_kind_order():
    b, u = tree()
    found = check_move(b.build(), u["ops"], u["nlp"])
    assert ViolationCode.KIND_ORDER in {v.code for v in found}


def test_effective_ceiling_is_the_tightest_on_the_path():
    b, u = tree()
    snapshot = b.build()
    assert effective_ceiling(snapshot, u["llm"], F, GPU) == 30  # own 30, nlp 40, ml 80, acme 100
    b.quota(u["nlp"], F, GPU, 20, 5, 0)
    assert effective_ceiling(b.build(), u["llm"], F, GPU) == 25
    bulk = effective_ceilings(b.build())
    assert bulk[(u["llm"], F, GPU)] == 25 and bulk[(u["acme"], F, GPU)] == 100


def test_capacity_report():
    b, _ = tree()
    [line] = capacity_report(b.build())
    assert (line.physical, line.reserved, line.headroom, line.reclaimable, line.promised, line.left_to_promise) == (
        120,
        10,
        10,
        100,
        100,
        0,
    )


def test_flavor_capacity_check_for_reservation_changes():
    b, _ = tree()
    b.reservations.append(Reservation(F, "more", 1))
    [v] = check_flavor_capacity(b.build(), F)
    assert v.code is ViolationCode.GUARANTEES_EXCEED_CAPACITY and v.limit == 99


def test_infeasible_contract_and_inconsistent_tier():
    b, u = tree()
    b.contracts["tight"] = Contract(
        "tight",
        reclaim_within_s=300,
        grace_period_s=120,
        min_run_window_s=600,
        checkpoint_every_s=None,
        measured_exit_s=60,
    )
    b.tiers["P2"] = Tier("P2", 1000, preemptible=True, max_runtime_s=300)
    b.tiers["P3"] = Tier("P3", 100, preemptible=True, opportunistic=True)
    b.units[u["ops"]] = _with_contract(b.units[u["ops"]], "tight")
    found = validate_tree(b.build(scheduling_pass_s=10))
    infeasible = [v for v in found if v.code is ViolationCode.CONTRACT_INFEASIBLE]
    assert len(infeasible) == 1
    assert (infeasible[0].limit, infeasible[0].actual) == (300, 600 + 120 + 60 + 10)
    assert "13m10s" in infeasible[0].message
    tiers = {v.message.split(":")[0] for v in found if v.code is ViolationCode.TIER_INCONSISTENT}
    assert tiers == {"tier P2", "tier P3 is opportunistic but contract tight sets no checkpoint cadence"}


def _with_contract(unit, name):
    from dataclasses import replace

    return replace(unit, contract=name)


def test_unknown_contract_on_a_unit():
    b, u = tree()
    b.units[u["ops"]] = _with_contract(b.units[u["ops"]], "nope")
    assert ViolationCode.UNKNOWN_CONTRACT in {v.code for v in validate_tree(b.build())}


def test_effective_contract_is_inherited():
    b, u = tree()
    b.contracts["std"] = Contract("std", 900, 60)
    b.units[u["ml"]] = _with_contract(b.units[u["ml"]], "std")
    snapshot = b.build()
    assert snapshot.effective_contract(u["llm"]).name == "std"
    assert snapshot.effective_contract(u["ops"]) is None
