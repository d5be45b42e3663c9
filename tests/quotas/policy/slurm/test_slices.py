"""MIG slices on Slurm (issue #45.3): each profile a GPU type of its own, limited to the whole slices the
unit's GPU-equivalents hold, billed by weight; job_submit.lua's snapshot adds a job's slices up by weight;
the coverage report says what Slurm cannot enforce."""

from fractions import Fraction

from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.slurm.coverage import slurm_coverage
from quotas.policy.slurm.overcommit import subtree_overcommit
from quotas.policy.slurm.submit import submit_policy
from quotas.policy.slurm.translate import SlurmFlavor, SlurmTarget, compile_slurm
from quotas.policy.snapshot import Contract

A100, MIG = "lab/a100", "lab/h100-mig"
PROFILES = (("1g.10gb", Fraction(1, 7)), ("3g.40gb", Fraction(1, 2)))


def tree(strict=True):
    """acme (a100 8, h100-mig 4 GPU-equivalents) → infer (mig 2 + burst 1), train (a100 8)."""
    b = TreeBuilder()
    b.flavor(A100, 8)
    b.flavor(MIG, 4)
    b.contracts["std"] = Contract("std", 900, 20, 30)
    acme = b.unit("acme", UnitKind.ORGANISATION, contract="std")
    infer = b.unit("infer", UnitKind.TEAM, acme)
    train = b.unit("train", UnitKind.TEAM, acme)
    b.quota(acme, A100, Resource.GPU, 8)
    b.quota(acme, MIG, Resource.GPU, 4)
    b.quota(infer, MIG, Resource.GPU, 2, 1)
    b.quota(train, A100, Resource.GPU, 8)
    target = SlurmTarget(
        "lab",
        (SlurmFlavor(A100, "a100", 1.0), SlurmFlavor(MIG, "h100-mig", 2.0, PROFILES)),
        members={infer: ("ann",)},
        strict=strict,
    )
    return b.build(), target


def test_each_profile_is_a_gpu_type_holding_the_slices_the_equivalents_hold():
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    qos = {q.name: q for q in state.qos}
    assert qos["guar-infer"].grp_tres == {
        "gres/gpu:h100-mig_1g.10gb": 14,  # 2 GPU-equivalents: 14 × 1/7
        "gres/gpu:h100-mig_3g.40gb": 4,  # or 4 × 1/2
        "gres/gpu": 18,  # the untyped backstop: a slice counts one gres/gpu on Slurm
    }
    assert qos["burst-infer"].grp_tres == {
        "gres/gpu:h100-mig_1g.10gb": 7,
        "gres/gpu:h100-mig_3g.40gb": 2,
        "gres/gpu": 9,
    }
    assert qos["guar-acme"].grp_tres["gres/gpu:h100-mig_1g.10gb"] == 14  # the residual 4 − 2
    assert qos["guar-train"].grp_tres == {"gres/gpu:a100": 8, "gres/gpu": 8}
    assert state.billing[MIG] == "CPU=1.0,Mem=0.25G,GRES/gpu:h100-mig_1g.10gb=2.85714,GRES/gpu:h100-mig_3g.40gb=10"
    assert state.billing[A100] == "CPU=1.0,Mem=0.25G,GRES/gpu:a100=10"


def test_job_submit_adds_a_jobs_slices_up_by_weight():
    snapshot, target = tree()
    state = compile_slurm(snapshot, target)
    policy = submit_policy(snapshot, target, state, revision=1)
    infer = policy["accounts"]["infer"]
    assert infer["gpus"] == {"a100": 0, "h100-mig_1g.10gb": 21, "h100-mig_3g.40gb": 6}  # ceiling 3 per profile
    assert infer["equivalents"] == {"h100-mig": 3}
    assert policy["slices"] == {
        "h100-mig_1g.10gb": {"flavor": "h100-mig", "micro": 142857},
        "h100-mig_3g.40gb": {"flavor": "h100-mig", "micro": 500000},
    }
    assert policy["accounts"]["train"]["equivalents"] == {"h100-mig": 0}  # no MIG quota: refused per type too
    # what the Lua check computes: 14 × 1g.10gb + 2 × 3g.40gb = 3 equivalents fits, one more slice does not
    weigh = sum(n * policy["slices"][k]["micro"] for k, n in {"h100-mig_1g.10gb": 14, "h100-mig_3g.40gb": 2}.items())
    assert weigh <= infer["equivalents"]["h100-mig"] * 1_000_000 < weigh + 142857


def test_coverage_says_slices_are_held_by_weight_only_per_job():
    snapshot, target = tree()
    lines = slurm_coverage(snapshot, compile_slurm(snapshot, target), target)
    mig = [line for line in lines if line.subject == "flavor h100-mig"]
    assert [(line.term, line.how.value) for line in mig] == [
        ("MIG slices, each profile", "enforced_by_slurm"),
        ("MIG slices, by weight", "enforced_by_allot_job_submit"),
    ]
    assert "jobs of different profiles running together are not held to the equivalents" in mig[1].mechanism


def test_permissive_overcommit_is_counted_in_slices():
    snapshot, target = tree(strict=False)
    state = compile_slurm(snapshot, target)
    assert subtree_overcommit(snapshot, state, target) == []  # infer's QOS hold exactly its ceiling's slices
