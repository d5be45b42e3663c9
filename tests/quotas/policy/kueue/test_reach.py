"""What each ClusterQueue can ever admit, by Kueue's quota arithmetic (issue #39.5). Pure.

The figures are the real Kueue's: tests/quotas/test_kube_real.py sweeps every queue and flavor of the demo on
Kueue v0.13 and reads the same "maximum capacity" from its own messages."""

from pathlib import Path

import yaml

from quotas.policy import Resource
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue
from quotas.policy.kueue.reach import reachable
from quotas.policy.kueue.target import CompileError
from quotas.policy.snapshot import UnitKind

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "kueue-k8s-west.yaml"
GPU = Resource.GPU


def test_a_parents_own_queue_never_reaches_the_guarantees_its_children_keep():
    """nlp: guarantee 24 + burst 16 = 40 H100 by the tree; its projects keep 12 they do not lend, so Kueue's
    own queue for nlp reaches 28 (what a real Kueue admitted at most); on A100-40GB 94, not 135."""
    reach = reachable(yaml.safe_load_all(GOLDEN.read_text()))
    assert reach[("acme.research.nlp", "h100-80gb", "nvidia.com/gpu")] == 28
    assert reach[("acme.research.nlp", "a100-40gb", "nvidia.com/gpu")] == 94
    assert reach[("acme.research.vision", "h100-80gb", "nvidia.com/gpu")] == 18
    assert reach[("acme.production.serving", "h100-80gb", "nvidia.com/gpu")] == 15


def test_reach_is_guaranteed_plus_what_the_parent_reaches_capped_by_the_borrowing_limit():
    b = TreeBuilder()
    b.flavor("w/a", 20)
    org = b.unit("o", UnitKind.ORGANISATION)
    team = b.unit("t", UnitKind.TEAM, org)
    other = b.unit("u", UnitKind.TEAM, org)
    b.quota(org, "w/a", GPU, 20)
    b.quota(team, "w/a", GPU, 8, 5, lendable=2)  # keeps 6, lends 2, borrows at most 5
    b.quota(other, "w/a", GPU, 12, 0, lendable=3)  # keeps 9 for itself: never reachable by t
    target = KueueTarget("w", (KueueFlavor("w/a", "a"),), namespaces={team: ("t",), other: ("u",)})
    reach = reachable(compile_kueue(b.build(), target))
    # t: 8 + 5 = 13 by its limits; the org holds its residual 0 + t's 2 + u's 3 = 5 for others: 6 + 5 = 11
    assert reach[("o.t", "a", "nvidia.com/gpu")] == 11
    assert reach[("o.u", "a", "nvidia.com/gpu")] == 12  # no borrowing limit above 0: its own 12


def test_the_webhook_judges_a_parents_own_queue_by_what_kueue_can_reach():
    """A team with a capped project keeps 6 of its 10: its own queue (nominal 0) reaches 4 + burst 2 = 6 by Kueue's
    arithmetic though the tree's ceiling is 12. The admission policy's ceiling is Kueue's; the project's queue
    keeps the tree's ceiling where Kueue reaches it."""
    from admission.policy.model import compile_policy

    b = TreeBuilder()
    b.flavor("w/a", 12)
    org = b.unit("o", UnitKind.ORGANISATION)
    team = b.unit("t", UnitKind.TEAM, org)
    project = b.unit("p", UnitKind.PROJECT, team)
    b.quota(org, "w/a", GPU, 12)
    b.quota(team, "w/a", GPU, 10, 2, lendable=0)
    b.quota(project, "w/a", GPU, 6, 0, lendable=0)
    target = KueueTarget("w", (KueueFlavor("w/a", "a"),), namespaces={team: ("team-ns",), project: ("proj-ns",)})
    snapshot = b.build()
    reach = reachable(compile_kueue(snapshot, target))
    assert reach[("o.t", "a", "nvidia.com/gpu")] == 6  # 10 − 6 kept by the project + 2 borrowed
    assert reach[("o.t.p", "a", "nvidia.com/gpu")] == 6
    policy = compile_policy(snapshot, target, members={}, allowed_tiers={}, flavor_memory={})
    assert policy.namespaces["team-ns"].ceilings == {"a": 6}  # the tree alone said 12
    assert policy.namespaces["proj-ns"].ceilings == {"a": 6}


def test_a_tree_the_compiler_refuses_keeps_the_trees_ceilings(monkeypatch):
    from admission.policy import model

    b = TreeBuilder()
    b.flavor("w/a", 8)
    org = b.unit("o", UnitKind.ORGANISATION)
    team = b.unit("t", UnitKind.TEAM, org)
    b.quota(org, "w/a", GPU, 8)
    b.quota(team, "w/a", GPU, 4, 2)

    def refuse(*args, **kwargs):
        raise CompileError("no")

    monkeypatch.setattr(model, "compile_kueue", refuse)
    target = KueueTarget("w", (KueueFlavor("w/a", "a"),), namespaces={team: ("ns",)})
    policy = model.compile_policy(b.build(), target, members={}, allowed_tiers={}, flavor_memory={})
    assert policy.namespaces["ns"].ceilings == {"a": 6}
