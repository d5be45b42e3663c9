"""A QOS's GPU limits and use as slurmctld holds them (accounting.policy.slurm_qos), from the local stack's own
output (tests/fixtures/slurm-outputs/scontrol-show-assoc-mgr-qos.txt: alice's 2-GPU job running under guar-nlp)."""

from __future__ import annotations

from pathlib import Path

from accounting.policy.slurm_qos import parse_assoc_mgr_qos, qos_said

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm-outputs"


def test_each_qos_has_its_gpu_limits_and_what_its_jobs_hold():
    found = parse_assoc_mgr_qos((FIXTURES / "scontrol-show-assoc-mgr-qos.txt").read_text())
    assert set(found) == {"guar-nlp", "burst-nlp"}
    assert dict(found["guar-nlp"].gpus) == {"gres/gpu": (2, 2), "gres/gpu:a100": (2, 2), "gres/gpu:h100": (None, 0)}
    assert dict(found["burst-nlp"].gpus)["gres/gpu:a100"] == (1, 0)
    assert (
        qos_said(found, ["guar-nlp", "burst-nlp"], "a100") == "Slurm: QOS guar-nlp 2 of 2, burst-nlp 0 of 1 GPUs held"
    )
    assert qos_said(found, ["guar-nlp"], "h100") == "Slurm: QOS guar-nlp 2 of 2 GPUs held"  # no h100 limit: untyped
    assert qos_said(found, ["guar-vision"], None) == ""
    assert parse_assoc_mgr_qos("Current Association Manager state\n\nNo QOS currently cached in Slurm.\n") == {}
