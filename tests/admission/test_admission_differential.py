"""The webhook's admission decisions against the real Kueue, case by case (tests/admission/differential.py):
seeded Jobs over flavors with different node-label keys, a tainted flavor and a MIG flavor — every Job the
webhook allows is admitted by Kueue on a queue with quota to spare, every Job it refuses is one Kueue never
admits. bench/admission_differential.py runs the long version."""

from __future__ import annotations

import pytest

from tests.admission.differential import cases, run, setup

pytestmark = pytest.mark.kube
SEEDS = (7, 62)
PER_SEED = 30


@pytest.fixture(scope="module")
def pinned_policy(kube_plane):
    return setup(kube_plane)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_webhook_and_kueue_agree_on_every_generated_job(kube_plane, pinned_policy, seed):
    outcomes = run(kube_plane, pinned_policy, list(cases(seed, PER_SEED)))
    disagreements = [o.line() for o in outcomes if not o.agrees]
    assert not disagreements, "\n".join(disagreements)
    # the seeds cover both verdicts and the pin rules that differ from a per-flavor reading
    assert any(o.allowed for o in outcomes) and any(not o.allowed for o in outcomes)
