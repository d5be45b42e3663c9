"""Why a workload waits (accounting.policy.waiting, issue #44.2): causes in Allot's terms, ways out that fit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from accounting.policy.kueue_ask import Ask, ask_of
from accounting.policy.waiting import Holding, LiveView, Pending, explain
from quotas.policy import Resource
from quotas.policy.builder import TreeBuilder
from quotas.policy.snapshot import Contract, Tier, UnitKind

GPU = Resource.GPU
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def tree():
    """org (8 a100, 8 v100) → owner (4 a100 lendable 4, burst 0; 4 v100 burst 4) and borrower (4 a100 burst 4)."""
    b = TreeBuilder()
    b.flavor("c/a100", 8)
    b.flavor("c/v100", 8)
    b.contracts["std"] = Contract("std", 600, 30)
    b.tiers["P1"] = Tier("P1", 10000, False)
    b.tiers["P0"] = Tier("P0", 100000, False)
    root = b.unit("org", UnitKind.ORGANISATION, contract="std")
    b.quota(root, "c/a100", GPU, 8)
    b.quota(root, "c/v100", GPU, 8)
    owner = b.unit("owner", UnitKind.TEAM, root)
    borrower = b.unit("borrower", UnitKind.TEAM, root)
    b.quota(owner, "c/a100", GPU, 4, 0, lendable=4)
    b.quota(owner, "c/v100", GPU, 4, 4, lendable=4)
    b.quota(borrower, "c/a100", GPU, 4, 4, lendable=4)
    b.quota(borrower, "c/v100", GPU, 4, 0, lendable=4)
    return b.build(), owner, borrower


def waiting(unit, devices, *, flavors=None, created=NOW - timedelta(minutes=5), name="ns/mine", tier="P1", per_pod=0):
    ask = Ask(pods=1, per_pod=per_pod or devices, devices=devices, reason="Pending", message="insufficient quota")
    return Pending(name, unit, "erin", tier, "q", created, ask, flavors)


def view(*holding, pending=()):
    return LiveView("c", NOW - timedelta(seconds=3), ("c/v100", "c/a100"), tuple(holding), tuple(pending))


def test_an_owner_whose_lent_guarantee_is_held_by_a_borrower_is_told_who_holds_it_and_by_when():
    snapshot, owner, borrower = tree()
    big = Holding("b/big", borrower, "org/borrower", "bo", "P1", "c/a100", 8, borrowed=4)
    full_v100 = Holding("b/v", borrower, "org/borrower", "bo", "P1", "c/v100", 8, borrowed=4)
    late = waiting(owner, 4, flavors=("c/a100",), created=NOW - timedelta(minutes=15))
    found = explain(snapshot, view(big, full_v100), late, now=NOW)
    top = found.top
    assert top is not None and top.code == "reclaim"
    assert "b/big (8 devices, 4 borrowed, org/borrower)" in " ".join(top.evidence)
    assert "overdue: the promise is broken" in top.evidence[-1]  # 15 min > the contract's 10
    wait = next(w for w in found.ways_out if w.kind == "wait-reclaim")
    assert wait.by == NOW - timedelta(minutes=5)
    assert found.scheduler_says == "Pending: insufficient quota"


def test_a_unit_at_its_ceiling_is_told_its_own_work_and_offered_the_largest_start_and_another_flavor():
    snapshot, owner, _ = tree()
    mine = Holding("o/first", owner, "org/owner", "erin", "P1", "c/v100", 6, borrowed=2)
    found = explain(snapshot, view(mine), waiting(owner, 4, flavors=("c/v100",), per_pod=1), now=NOW)
    codes = [c.code for c in found.causes]
    assert codes[0] == "borrowing-limit", codes
    assert "o/first (6 devices, 2 borrowed, erin)" in " ".join(found.causes[0].evidence)
    ways = {w.kind: w for w in found.ways_out}
    assert ways["smaller"].devices == 2  # ceiling 8 − 6 held
    assert "quota-change" not in ways  # only 2 of v100's 8 are free: a larger ceiling would not start it
    assert "wait-finish" in ways
    # the pin keeps it off a100, where its 4 guaranteed devices are idle: offered, and said
    assert ways["other-flavor"].flavor == "c/a100"
    assert "pin" in codes


def test_a_quota_change_is_offered_only_where_the_flavor_has_the_devices_free():
    snapshot, owner, _ = tree()
    mine = Holding("o/first", owner, "org/owner", "erin", "P1", "c/a100", 4)
    found = explain(snapshot, view(mine), waiting(owner, 2, flavors=("c/a100",)), now=NOW)
    ways = {w.kind: w for w in found.ways_out}
    assert ways["quota-change"].change == {"guarantee": 4, "burst": 2}  # 4 held + 2 asked = 4 + 2
    assert found.room["c/a100"] == {"guarantee": 4, "ceiling": 4, "held": 4, "free": 4, "room": 0}


def test_whole_pods_a_gang_of_4_gpu_pods_is_offered_whole_pods_only():
    snapshot, owner, _ = tree()
    mine = Holding("o/first", owner, "org/owner", "erin", "P1", "c/v100", 3)
    found = explain(snapshot, view(mine), waiting(owner, 8, flavors=("c/v100",), per_pod=4), now=NOW)
    assert {w.kind: w.devices for w in found.ways_out}["smaller"] == 4  # 5 would start, one whole pod is 4


def test_queue_position_names_the_older_and_higher_tier_work_ahead():
    snapshot, owner, _ = tree()
    first = waiting(owner, 2, name="ns/older", created=NOW - timedelta(hours=1))
    urgent = waiting(owner, 2, name="ns/urgent", created=NOW, tier="P0")
    me = waiting(owner, 2, name="ns/mine", created=NOW - timedelta(minutes=5))
    later = waiting(owner, 2, name="ns/later", created=NOW)
    found = explain(snapshot, view(pending=(first, urgent, me, later)), me, now=NOW)
    queue = next(c for c in found.causes if c.code == "queue")
    assert queue.title == "behind 2 workloads of org/owner in its queue"
    assert queue.evidence == ("ns/older, ns/urgent",)


def test_a_spent_hold_budget_comes_first_and_a_namespace_without_a_unit_is_said():
    from dataclasses import replace
    from types import MappingProxyType

    from quotas.policy.budgets import Budget, BudgetAction, BudgetSpend

    snapshot, owner, _ = tree()
    budget = Budget(owner, "c/a100", 100, action=BudgetAction.HOLD, tiers=("P1",))
    spend = BudgetSpend(NOW.replace(day=1), 100.0, 120.0)
    held = replace(
        snapshot,
        budgets=MappingProxyType({(owner, "c/a100"): budget}),
        budget_spend=MappingProxyType({(owner, "c/a100"): spend}),
    )
    found = explain(held, view(), waiting(owner, 2, flavors=("c/a100",)), now=NOW)
    assert found.top is not None and found.top.code == "budget"
    assert found.top.title == "held: org/owner spent 120 of 100 device-hours on c/a100 (hold)"
    resets = f"{NOW.year + NOW.month // 12}-{NOW.month % 12 + 1:02d}-01"
    assert found.top.evidence == (f"until the period resets on {resets} UTC, or a budget raise",)
    raise_it = next(w for w in found.ways_out if w.kind == "budget")
    assert raise_it.flavor == "c/a100" and "to more than its 120 device-hours spent (at least 121" in raise_it.text
    since = replace(held, budget_spend=MappingProxyType({(owner, "c/a100"): replace(spend, exhausted_at=NOW)}))
    dated = explain(since, view(), waiting(owner, 2, flavors=("c/a100",)), now=NOW).top
    assert dated is not None and dated.title.endswith(f"(hold, since {NOW:%Y-%m-%d %H:%M} UTC)")
    nobody = explain(snapshot, view(), waiting(None, 2), now=NOW)
    assert [c.code for c in nobody.causes] == ["no-unit"]


def test_the_ask_is_read_from_a_waiting_workload_as_kueue_stores_it():
    workload = {
        "metadata": {"ownerReferences": [{"kind": "Job", "name": "train", "controller": True, "uid": "u"}]},
        "spec": {
            "podSets": [
                {"name": "main", "count": 2, "template": {"spec": {
                    "nodeSelector": {"gpu": "a100"},
                    "containers": [{"resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "1"}}}],
                }}},
            ]
        },
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "m"}],
            "admissionChecks": [{"name": "prov", "state": "Pending"}, {"name": "ok", "state": "Ready"}],
        },
    }  # fmt: skip
    ask = ask_of(workload, {"nvidia.com/gpu": None}, at=NOW)
    assert (ask.pods, ask.per_pod, ask.devices, ask.job) == (2, 4, 8, "Job/train")
    assert ask.placement == {"nodeSelector": {"gpu": "a100"}} and ask.checks == ("prov",)
    assert (ask.reason, ask.message, ask.since) == ("Pending", "m", NOW)


def test_room_in_quota_but_no_node_with_room_for_a_pod_is_fragmentation():
    snapshot, owner, _ = tree()
    gang = waiting(owner, 4, flavors=("c/a100",), per_pod=4)
    base = view()
    fragmented = LiveView(base.cluster, base.observed_at, base.flavors, blocks={"c/a100": 2})
    found = explain(snapshot, fragmented, gang, now=NOW)
    assert found.top is not None and found.top.code == "fragmentation"
    assert "no node has 4 free for one of its pods: the largest free block is 2" in found.top.title
    assert {w.kind: w.text for w in found.ways_out}["smaller"] == "split it into pods of at most 2 devices each"
    assert "scheduling" not in [c.code for c in found.causes]
    roomy = LiveView(base.cluster, base.observed_at, base.flavors, blocks={"c/a100": 8})
    fits = explain(snapshot, roomy, gang, now=NOW).top
    assert fits is not None and fits.code == "scheduling"  # a node has room: it simply fits


def test_a_workload_of_slices_is_weighed_in_gpu_equivalents_against_the_ceiling_of_the_flavor_that_offers_them():
    """Issue #45: slices of a shared flavor are what they weigh — not 0 devices — and the ceiling is in
    GPU-equivalents; past the ceiling Allot says it does not explain slices further and gives Kueue's word."""
    from dataclasses import replace

    from accounting.policy.kueue_ask import ask_from_json, ask_to_json
    from quotas.policy.sharing import flavor_sharing

    b = TreeBuilder()
    b.flavor("c/mig", 2)
    b.flavors["c/mig"] = replace(
        b.flavors["c/mig"],
        sharing=flavor_sharing(
            "mig", accelerator_model="NVIDIA H100 80GB HBM3", memory_gb=80, profiles=("1g.10gb", "3g.40gb")
        ),
    )
    b.tiers["P1"] = Tier("P1", 10000, False)
    root = b.unit("org", UnitKind.ORGANISATION)
    b.quota(root, "c/mig", GPU, 2)
    team = b.unit("infer", UnitKind.TEAM, root)
    b.quota(team, "c/mig", GPU, 1)
    snapshot = b.build()
    live = LiveView("c", NOW, ("c/mig",), (), ())

    def asking(**slices):
        def pod(profile):
            return {"containers": [{"name": "m", "resources": {"requests": {f"nvidia.com/mig-{profile}": "1"}}}]}

        pod_sets = [
            {"name": f"p{i}", "count": n, "template": {"spec": pod(p)}} for i, (p, n) in enumerate(slices.items())
        ]
        says = "insufficient quota for allot.dev/gpu-equivalent-millionths"
        waits = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": says}
        ask = ask_of({"spec": {"podSets": pod_sets}, "status": {"conditions": [waits]}}, {"nvidia.com/gpu": None})
        assert ask_from_json(ask_to_json(ask)) == ask
        return Pending("infer/job", team, "ann", "P1", "q", NOW, ask, None)

    eight = asking(**{"1g.10gb": 8})
    assert eight.ask.slices == {"nvidia.com/mig-1g.10gb": 8} and eight.ask.devices == 0
    found = explain(snapshot, live, eight, now=NOW)
    assert found.top is not None and found.top.code == "beyond-ceiling"
    assert found.top.title == "asks for 1.14 GPU-equivalents (8 × 1g.10gb); org/infer may hold at most 1 on c/mig"
    seven = explain(snapshot, live, asking(**{"1g.10gb": 7}), now=NOW)
    assert (
        seven.top is not None
        and seven.top.code == "slices"
        and "asks for 1 GPU-equivalent (7 × 1g.10gb) on c/mig" in seven.top.title
    )
    assert seven.scheduler_says.startswith("Pending: insufficient quota for allot.dev/gpu-equivalent-millionths")
    other = explain(snapshot, live, asking(**{"7g.80gb": 1}), now=NOW)
    assert other.top is not None and other.top.title == "no flavor it may run on offers 1 × 7g.80gb"
