"""A contract's promise holds for its worst-case borrower (quotas/policy/contracts.check_promises)."""

from __future__ import annotations

from dataclasses import replace

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.contracts import check_promises
from quotas.policy.invariants import validate_tree
from quotas.policy.snapshot import Contract

GPU = "lab/h100"


def _tree(*, lendable: int = 2, slurm: bool = False, borrower_window: int = 300):
    """acme → {production → serving (promise 5 min), research (borrows; window + 2 min grace)}."""
    b = TreeBuilder()
    b.flavor(GPU, 16)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    production = b.unit("production", UnitKind.DEPARTMENT, acme)
    serving = b.unit("serving", UnitKind.TEAM, production)
    research = b.unit("research", UnitKind.DEPARTMENT, acme)
    b.quota(acme, GPU, Resource.GPU, 16)
    b.quota(production, GPU, Resource.GPU, 8, lendable=lendable)
    b.quota(serving, GPU, Resource.GPU, 8, lendable=lendable)
    b.quota(research, GPU, Resource.GPU, 4, burst=4)
    snapshot = b.build()
    contracts = {
        "serving-strict": Contract("serving-strict", 300, 30),
        "research-relaxed": Contract("research-relaxed", 3600, 120, min_run_window_s=borrower_window),
    }
    units = dict(snapshot.units)
    units[serving] = replace(units[serving], contract="serving-strict")
    units[research] = replace(units[research], contract="research-relaxed")
    flavors = {k: replace(f, lends_idle_guarantees=slurm) for k, f in snapshot.flavors.items()}
    return replace(snapshot, units=units, contracts=contracts, flavors=flavors), serving, research


def test_the_issue_case_a_borrower_keeping_lent_devices_longer_than_the_promise_is_a_violation_naming_it():
    snapshot, _, _ = _tree()
    [broken] = check_promises(snapshot)
    assert broken.unit == "acme/production/serving" and broken.flavor == GPU and broken.field == "reclaim_within"
    assert broken.limit == 300 and broken.actual == 300 + 120 + 10  # window + grace + a scheduling pass
    assert "borrower acme/research may keep them 7m10s" in broken.message
    assert "shorten research-relaxed's minimum run window or grace by 2m10s" in broken.hint
    assert broken in validate_tree(snapshot)


def test_a_promise_that_covers_the_worst_borrower_holds():
    snapshot, _, _ = _tree(borrower_window=60)  # 60 + 120 + 10 = 190 s ≤ 300 s
    assert check_promises(snapshot) == []


def test_on_kueue_only_what_is_lendable_can_be_borrowed_on_slurm_every_idle_guarantee():
    assert check_promises(_tree(lendable=0)[0]) == []  # lendingLimit 0: nobody holds serving's devices
    assert len(check_promises(_tree(lendable=0, slurm=True)[0])) == 1  # a burst QOS runs on any idle GPU


def test_the_owners_own_line_does_not_borrow_from_it():
    """A project under serving bursting on serving's devices uses serving's own guarantee: no borrower."""
    b = TreeBuilder()
    b.flavor(GPU, 16)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    serving = b.unit("serving", UnitKind.DEPARTMENT, acme)
    batch = b.unit("batch", UnitKind.TEAM, serving)
    b.quota(acme, GPU, Resource.GPU, 16)
    b.quota(serving, GPU, Resource.GPU, 8, lendable=2)
    b.quota(batch, GPU, Resource.GPU, 2, burst=4)
    snapshot = b.build()
    units = dict(snapshot.units)
    units[serving] = replace(units[serving], contract="strict")
    units[batch] = replace(units[batch], contract="relaxed")
    contracts = {"strict": Contract("strict", 300, 30), "relaxed": Contract("relaxed", 3600, 600, min_run_window_s=600)}
    assert check_promises(replace(snapshot, units=units, contracts=contracts)) == []


def test_a_move_that_brings_a_borrower_to_an_owner_is_refused_like_a_contract_change():
    """Issue #41: a move changes whom a unit borrows from and the contract it inherits; it ran every check
    but the promises, so a borrower with a long run window moved beside serving was accepted."""
    from quotas.policy.invariants import check_move

    b = TreeBuilder()
    b.flavor(GPU, 32)
    acme = b.unit("acme", UnitKind.ORGANISATION)
    production = b.unit("production", UnitKind.DEPARTMENT, acme)
    serving = b.unit("serving", UnitKind.TEAM, production)
    research = b.unit("research", UnitKind.DEPARTMENT, acme)
    lab = b.unit("lab", UnitKind.ORGANISATION)  # another organisation: its borrowers never hold acme's devices
    tuning = b.unit("tuning", UnitKind.DEPARTMENT, lab)
    tuner = b.unit("tuner", UnitKind.TEAM, tuning)
    b.quota(acme, GPU, Resource.GPU, 16)
    b.quota(production, GPU, Resource.GPU, 8, lendable=2)
    b.quota(serving, GPU, Resource.GPU, 8, lendable=2)
    b.quota(research, GPU, Resource.GPU, 4, burst=4)
    b.quota(lab, GPU, Resource.GPU, 8)
    b.quota(tuning, GPU, Resource.GPU, 4, burst=4)
    b.quota(tuner, GPU, Resource.GPU, 2, burst=4)
    snapshot = b.build()
    units = dict(snapshot.units)
    units[serving] = replace(units[serving], contract="serving-strict")
    units[research] = replace(units[research], contract="quick")
    units[tuning] = replace(units[tuning], contract="quick")
    units[tuner] = replace(units[tuner], contract="long-runs")
    contracts = {
        "serving-strict": Contract("serving-strict", 300, 30),
        "quick": Contract("quick", 3600, 30, min_run_window_s=60),
        "long-runs": Contract("long-runs", 3600, 120, min_run_window_s=1800),
    }
    snapshot = replace(snapshot, units=units, contracts=contracts)
    assert validate_tree(snapshot) == []  # as it stands, every promise holds
    [broken] = check_move(snapshot, tuner, research)
    assert broken.field == "reclaim_within" and broken.unit == "acme/production/serving"
    assert "borrower acme/research/tuner" in broken.message  # named where it would be
    research_alone = replace(snapshot, units={k: v for k, v in snapshot.units.items() if k != serving})
    assert check_move(research_alone, tuner, research) == []  # no owner there to break a promise to
