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


def _lab_tree(guarantee: int, burst: int) -> tuple[TreeBuilder, int, int]:
    """8 GPUs of lab/gpu under acme; nlp guarantees ``guarantee`` and may borrow ``burst``."""
    b = TreeBuilder()
    b.flavor("lab/gpu", 8)
    root = b.unit("acme", UnitKind.ORGANISATION)
    b.quota(root, "lab/gpu", Resource.GPU, 8)
    nlp = b.unit("nlp", UnitKind.TEAM, root)
    b.quota(nlp, "lab/gpu", Resource.GPU, guarantee, burst)
    return b, root, nlp


def lab():
    """The captured lab's tree: nlp guarantees 4 and may borrow 3 on 8 GPUs; llm-eval and llm-pretrain under it."""
    b, _, nlp = _lab_tree(4, 3)
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


def test_an_owner_pending_for_resources_while_its_guarantee_is_lent_is_a_reclaim_naming_the_burst_jobs():
    """The captured preemption (squeue-preemption-timeline.psv, 1 s after the guaranteed job was submitted): two
    4-GPU jobs of the shared burst QOS hold the node, llm-pretrain's 3-GPU job inside guar-nlp pends with
    ``Resources``. That is a reclaim (Slurm preempts for it), not a full flavor."""
    b, root, nlp = _lab_tree(3, 1)
    units = {"nlp": nlp, "llm-pretrain": b.unit("llm-pretrain", UnitKind.PROJECT, nlp)}
    b.quota(units["llm-pretrain"], "lab/gpu", Resource.GPU, 3)
    for name, guarantee in (("vision", 2), ("serving", 3)):
        units[name] = b.unit(name, UnitKind.TEAM, root)
        b.quota(units[name], "lab/gpu", Resource.GPU, guarantee, 4)
    snapshot = b.build()
    maps = SlurmMaps("lab", units, {u: snapshot.path(u) for u in units.values()}, {"gpu": "lab/gpu"}, "lab/gpu")
    lines = [
        "|".join([*row[1:9], "1", "2026-12-06T11:00:00"])
        for row in (line.split("|") for line in (FIXTURES / "squeue-preemption-timeline.psv").read_text().splitlines())
        if row[0] == "1"
    ]
    jobs = parse_squeue("\n".join(lines))
    owner = next(j for j in jobs if j.state == "PENDING")
    found = explain_slurm(snapshot, slurm_view(jobs, maps, NOW), owner, maps, now=NOW)
    top = found.top
    assert top is not None and top.code == "reclaim", found.causes
    assert top.title.endswith("Slurm preempts the borrowers' burst jobs once their grace time is over")
    assert "job 38 (serving-burst) (4 devices, 4 borrowed, acme/serving)" in " ".join(top.evidence)
    assert top.evidence[-1] == "Slurm: Resources" and "flavor-full" not in [c.code for c in found.causes]
    assert any(w.kind == "wait-reclaim" for w in found.ways_out)


def test_a_job_pending_for_priority_names_the_jobs_ranked_above_it_by_squeues_priority():
    snapshot, maps = lab()
    jobs = parse_squeue(
        "\n".join(
            [
                "60|full|alice|nlp|guar-nlp|RUNNING|None|gres/gpu:8|1|2026-12-06T10:00:00|9000",
                "61|late-high|dave|llm-eval|guar-nlp|PENDING|Resources|gres/gpu:2|1|2026-12-06T11:30:00|20500",
                "62|early-low|dave|llm-eval|burst-nlp|PENDING|Priority|gres/gpu:1|1|2026-12-06T11:00:00|1200",
                "63|same-older|alice|nlp|burst-nlp|PENDING|Priority|gres/gpu:1|1|2026-12-06T10:59:00|1200",
                "64|below|alice|nlp|burst-nlp|PENDING|Priority|gres/gpu:1|1|2026-12-06T10:00:00|900",
            ]
        )
    )
    assert [j.priority for j in jobs] == [9000, 20500, 1200, 1200, 900]
    target = jobs[2]
    found = explain_slurm(snapshot, slurm_view(jobs, maps, NOW), target, maps, now=NOW, queue=jobs)
    top = found.top
    assert top is not None and top.code == "queue"
    assert top.title == "2 pending jobs on lab/gpu rank above it (its priority 1200)"
    assert top.evidence == (
        "job 61 (late-high) (2 GPUs, llm-eval, priority 20500), job 63 (same-older) (1 GPUs, nlp, priority 1200)",
        "sprio -l -j 62 shows its factors (fair-share, QOS, age)",
    )
    assert found.ways_out[0].kind == "wait-queue" and "(3 GPUs)" in found.ways_out[0].text


def test_an_association_limit_is_said_as_a_limit_set_outside_allot_with_the_accounts_jobs():
    snapshot, maps = lab()
    jobs = parse_squeue(
        "70|mine|alice|nlp|guar-nlp|RUNNING|None|gres/gpu:1|1|\n71|next|alice|nlp|burst-nlp|PENDING|AssocGrpGRES|gres/gpu:1|1|"
    )
    found = explain_slurm(snapshot, slurm_view(jobs, maps, NOW), jobs[1], maps, now=NOW, queue=jobs)
    top = found.top
    assert top is not None and top.code == "association-limit"
    assert "sacctmgr show assoc where account=nlp" in top.evidence[0]
    assert top.evidence[1] == "its running jobs on account nlp: job 70 (mine) (1 GPUs, alice)"
    assert [w.kind for w in found.ways_out][:2] == ["wait-finish", "ask"]


def test_every_form_of_gpu_request_is_read_as_job_submit_lua_counts_it():
    """Lines as ``squeue -h -O "JobID:|,…"`` printed them on the local Slurm stack (22.05): ``%b`` printed N/A
    for ``--gpus``, ``--gpus-per-task`` and ``--gpus-per-socket``, so those jobs read as asking for 0 devices."""
    from accounting.policy.slurm_waiting import FIELDS

    def line(job, per_job="N/A", per_task="N/A", per_socket="N/A", per_node="N/A", nodes=1, tasks=1, sockets="*"):
        values = [job, "alice", "nlp", "normal", "PENDING", "Priority", per_job, per_task, per_socket, per_node,
                  str(nodes), str(tasks), sockets, "2026-12-07T22:53:24", "4294", "train|v2"]  # fmt: skip
        assert len(values) == len(FIELDS)
        return "|".join(values) + "|"

    jobs = parse_squeue(
        "\n".join(
            [
                line("1", per_job="gres:gpu:a100:2"),  # --gpus=a100:2
                line("2", per_task="gres:gpu:a100:1", tasks=3),  # -n 3 --gpus-per-task=a100:1
                line("3", per_socket="gres:gpu:a100:1", nodes=2, sockets="2"),  # -N2 --sockets-per-node=2
                line("4", per_node="gres:gpu:h100:4", nodes=2),  # -N2 --gres=gpu:h100:4
                line("5"),  # no GPUs
            ]
        )
    )
    assert [(j.job_id, j.devices, j.gpu_type) for j in jobs] == [
        ("1", 2, "a100"), ("2", 3, "a100"), ("3", 4, "a100"), ("4", 8, "h100"), ("5", 0, None),
    ]  # fmt: skip
    assert jobs[0].name == "train|v2" and jobs[0].priority == 4294 and jobs[0].submitted is not None
