"""Reading sacct output: real captures from the project's Slurm 22.05 lab and from a production site."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from accounting.policy.sacct import EndState, LineProblem, billing_from_tres, fold_runs, gpus_from_tres, parse_sacct

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LAB = ("JobID", "JobName", "Account", "User", "QOS", "Partition", "AllocTRES", "Elapsed", "Submit", "Start", "End",
       "State", "ExitCode", "Reason")  # fmt: skip
XDMOD = ("JobID", "JobIDRaw", "Cluster", "Partition", "QOS", "Account", "Group", "GID", "User", "UID", "Submit",
         "Eligible", "Start", "End", "Elapsed", "ExitCode", "State", "NNodes", "NCPUS", "ReqCPUS", "ReqMem", "ReqTRES",
         "AllocTRES", "Timelimit", "NodeList", "JobName")  # fmt: skip


def runs(path, fields):
    lines = (FIXTURES / path).read_text().splitlines()
    if lines[0].startswith("JobID|"):
        lines = lines[1:]
    return list(parse_sacct(lines, zone=UTC, fields=fields))


@pytest.mark.parametrize(
    ("tres", "gpus"), json.loads((FIXTURES / "usage/alloctres-gpu-count-cases-xdmod.json").read_text())
)
def test_gpu_counts_of_real_alloctres_strings(tres, gpus):
    assert sum(gpus_from_tres(tres).values()) == gpus


def test_typed_and_untyped_counts_are_never_both_counted():
    assert gpus_from_tres("billing=41,cpu=1,gres/gpu:a100=4,gres/gpu=4,mem=1000M,node=1") == {"a100": 4}
    assert gpus_from_tres("cpu=1,gres/gpu=2") == {None: 2}


def test_billing_is_read_from_alloctres_and_is_the_cpus_without_billing_weights():
    assert billing_from_tres("billing=41,cpu=1,gres/gpu:a100=4,gres/gpu=4,mem=1000M,node=1") == 41.0
    assert billing_from_tres("cpu=4,mem=1000M,node=1") == 4.0
    assert billing_from_tres("") == 0.0
    found = [
        r
        for r in runs("slurm-outputs/sacct-parsable2-allocations-duplicates.psv", LAB)
        if not isinstance(r, LineProblem)
    ]
    assert found and all(r.billing > 0 for r in found if r.start)
    job = next(iter(fold_runs(found).values()))
    assert job.billing == job.runs[-1].billing


def test_requeued_jobs_of_the_lab_fold_into_one_workload_with_its_eviction():
    found = runs("slurm-outputs/sacct-parsable2-allocations-duplicates.psv", LAB)
    assert not [r for r in found if isinstance(r, LineProblem)]
    jobs = {job.job_id: job for job in fold_runs(found).values()}
    assert "11@2026-11-29T19:44:22" in {key for _, key in fold_runs(found)}  # id and first submit
    job = jobs["11"]
    assert job.state is EndState.CANCELLED and job.gpus == {"a100": 4} and job.account == "serving"
    assert [e.reason for e in job.evictions] == ["PREEMPTED"]
    assert job.evictions[0].at == datetime(2026, 11, 29, 19, 45, 30, tzinfo=UTC)
    assert (
        job.held_seconds == 67 and len([r for r in job.runs if r.start]) == 1
    )  # the requeued instance never started again
    assert job.submitted == datetime(2026, 11, 29, 19, 44, 22, tzinfo=UTC)
    assert {k for k, j in jobs.items() if j.evictions} == {"11", "19", "27", "38"}  # 38: preempted, not requeued
    assert jobs["38"].state is EndState.PREEMPTED and len(jobs["38"].evictions) == 1


def test_a_production_sites_lines_timeouts_cancellations_and_gpus():
    found = runs("usage/sacct-P-X-D-noheader-xdmod-ub-hpc.psv", XDMOD)
    assert not [r for r in found if isinstance(r, LineProblem)]
    states = {r.job_id: (r.state, r.raw_state) for r in found if not isinstance(r, LineProblem)}
    assert states["4103947"] == (EndState.TIMEOUT, "TIMEOUT")
    assert states["4107166"] == (EndState.CANCELLED, "CANCELLED by 102216")
    gpu_jobs = [r for r in found if not isinstance(r, LineProblem) and r.gpus]
    assert gpu_jobs and all(sum(r.gpus.values()) > 0 for r in gpu_jobs)


def test_running_and_pending_jobs_have_no_end_yet():
    found = [
        r for r in runs("usage/sacct-P-X-D-noheader-xdmod-running-pending.psv", XDMOD) if not isinstance(r, LineProblem)
    ]
    by_state = {r.state: r for r in found}
    assert by_state[EndState.PENDING].start is None
    folded = fold_runs([by_state[EndState.RUNNING]])
    assert next(iter(folded.values())).ended is None  # End is the last update for a running job, not its end


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("1|lab|nlp|alice|guar-nlp|gpu|COMPLETED|2026-11-29T19:00:00", "8 fields, expected 13"),
        ("1|7|lab|nlp|alice|guar-nlp|gpu|EXPLODED|2026-11-29T19:00:00|2026-11-29T19:00:00|2026-11-29T19:01:00||0:0",
         "unknown job state 'EXPLODED'"),
        ("1|7|lab|nlp|alice|guar-nlp|gpu|COMPLETED|yesterday|2026-11-29T19:00:00|2026-11-29T19:01:00||0:0",
         "is not ISO 8601"),
        ("1|7|lab|nlp|alice|guar-nlp|gpu|COMPLETED|2026-11-29T19:00:00|2026-11-29T19:05:00|2026-11-29T19:01:00||0:0",
         "before it starts: clock skew?"),
    ],
)  # fmt: skip
def test_a_bad_line_is_kept_with_its_number_and_the_reason(line, error):
    (found,) = parse_sacct(["", line], zone=UTC)
    assert isinstance(found, LineProblem) and found.line == 2 and error in found.error


def test_runs_of_one_job_listed_apart_fold_in_the_order_they_ran():
    """sacct lists a requeued job's runs by submit time, other jobs in between (seen on the lab)."""
    day = "2026-12-01T02:32"
    lines = [
        f"9|20|lab|nlp|alice|burst-nlp|gpu|PREEMPTED|{day}:10|{day}:10|{day}:31|gres/gpu:a100=4|0:0",
        f"10|19|lab|nlp|alice|guar-nlp|gpu|COMPLETED|{day}:10|{day}:10|{day}:32|gres/gpu:a100=1|0:0",
        f"9|25|lab|nlp|alice|burst-nlp|gpu|CANCELLED by 0|{day}:31|{day}:32|{day}:32|gres/gpu:a100=4|0:0",
    ]
    jobs = fold_runs(r for r in parse_sacct(reversed(lines), zone=UTC) if not isinstance(r, LineProblem))
    (job,) = [j for j in jobs.values() if j.job_id == "9"]
    assert job.state is EndState.CANCELLED and [e.reason for e in job.evictions] == ["PREEMPTED"]
    assert len(job.runs) == 2 and job.held_seconds == 21
    twice = fold_runs(r for r in parse_sacct(lines + lines, zone=UTC) if not isinstance(r, LineProblem))
    assert len(twice[("lab", "9@2026-12-01T02:32:10")].runs) == 2  # a run read twice counts once


def test_a_job_id_handed_out_again_after_a_reset_is_another_job():
    lines = [
        "16|30|lab|nlp|alice|guar-nlp|gpu|REQUEUED|2026-12-01T02:41:40|2026-12-01T02:43:41|2026-12-01T02:43:43|gres/gpu:a100=2|0:0",
        "16|31|lab|nlp|alice|guar-nlp|gpu|CANCELLED by 0|2026-12-01T02:43:43|None|2026-12-01T02:43:44|gres/gpu:a100=2|0:0",  # noqa: E501
        "16|52|lab|vision|bob|guar-vision|gpu|COMPLETED|2026-12-01T05:10:00|2026-12-01T05:10:01|2026-12-01T05:11:00|gres/gpu:a100=1|0:0",
    ]  # fmt: skip
    jobs = fold_runs(r for r in parse_sacct(lines, zone=UTC) if not isinstance(r, LineProblem))
    assert sorted(key for _, key in jobs) == ["16@2026-12-01T02:41:40", "16@2026-12-01T05:10:00"]
    assert jobs[("lab", "16@2026-12-01T02:41:40")].state is EndState.CANCELLED
    assert jobs[("lab", "16@2026-12-01T05:10:00")].account == "vision"
