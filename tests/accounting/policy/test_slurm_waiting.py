"""Why a Slurm job waits (accounting.policy.slurm_waiting): squeue's real reasons (captured from the local Slurm
stack, tests/fixtures/slurm-outputs) read against the tree's QOS, with the jobs named."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from accounting.policy.slurm_waiting import SlurmMaps, explain_slurm, parse_squeue, slurm_view
from quotas.policy import Resource
from quotas.policy.builder import TreeBuilder
from quotas.policy.snapshot import UnitKind

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm-outputs"
NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


def lab():
    """The captured lab's tree: nlp guarantees 4 and may borrow 3 on 8 GPUs; llm-eval and llm-pretrain under it."""
    b = TreeBuilder()
    b.flavor("lab/gpu", 8)
    root = b.unit("acme", UnitKind.ORGANISATION)
    b.quota(root, "lab/gpu", Resource.GPU, 8)
    nlp = b.unit("nlp", UnitKind.TEAM, root)
    b.quota(nlp, "lab/gpu", Resource.GPU, 4, 3)
    units = {"nlp": nlp}
    for name in ("llm-eval", "llm-pretrain"):
        units[name] = b.unit(name, UnitKind.PROJECT, nlp)
        b.quota(units[name], "lab/gpu", Resource.GPU, 2, 2)
    snapshot = b.build()
    maps = SlurmMaps("lab", units, {u: snapshot.path(u) for u in units.values()}, {"gpu": "lab/gpu"}, "lab/gpu")
    return snapshot, maps


def test_squeue_lines_are_read_as_slurm_prints_them():
    jobs = parse_squeue((FIXTURES / "squeue-borrowing.psv").read_text())
    assert [j.job_id for j in jobs] == ["37", "36", "33", "35", "34"]  # the header is no job
    first = jobs[0]
    assert (first.account, first.qos, first.state, first.reason, first.per_node, first.nodes, first.gpu_type) == (
        "llm-eval", "guar-nlp", "PENDING", "QOSGrpGRES", 1, 1, None
    )  # fmt: skip
    [typed] = parse_squeue("41|train|alice|nlp|burst-nlp|PENDING|Priority|gres:gpu:a100:4|2|2026-12-06T11:00:00")
    assert (typed.gpu_type, typed.devices, typed.submitted) == ("a100", 8, datetime(2026, 12, 6, 11, tzinfo=UTC))


def test_a_full_guarantee_qos_and_a_burst_cap_are_named_with_the_jobs_that_hold_them():
    snapshot, maps = lab()
    jobs = parse_squeue((FIXTURES / "squeue-borrowing.psv").read_text())
    view = slurm_view(jobs, maps, NOW)
    over = explain_slurm(snapshot, view, jobs[0], maps, now=NOW)
    assert over.top is not None and over.top.code == "guarantee-qos"
    assert over.top.title == "its guarantee QOS guar-nlp is full: job 33 (nlp-guaranteed) (3 GPUs, dave) hold it"
    assert over.scheduler_says == "PENDING (QOSGrpGRES)"
    cap = explain_slurm(snapshot, view, jobs[1], maps, now=NOW)
    assert cap.top is not None and cap.top.code == "borrowing-limit"
    assert "job 34 (nlp-borrow) (3 GPUs, dave)" in cap.top.title and "MaxGRESPerAccount" in cap.top.evidence[0]


def test_a_limit_reason_with_room_in_the_burst_qos_offers_it():
    snapshot, maps = lab()
    jobs = parse_squeue(
        "51|hold|alice|nlp|guar-nlp|RUNNING|None|gres:gpu:2|1|\n52|next|alice|nlp|guar-nlp|PENDING|QOSGrpGRES|gres:gpu:1|1|"
    )
    found = explain_slurm(snapshot, slurm_view(jobs, maps, NOW), jobs[1], maps, now=NOW)
    assert found.ways_out[0].kind == "other-qos" and "--qos=burst-nlp" in found.ways_out[0].text
    assert found.causes[0].code == "guarantee-qos"
    assert all(c.code != "scheduling" for c in found.causes)  # the scheduler said a limit: not "it fits now"
