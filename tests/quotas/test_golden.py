"""Golden files: the demo organisation compiles to exactly the committed objects.

A change to the translator that changes any byte shows up here; when it is intended, regenerate
with ``ALLOT_UPDATE_GOLDEN=1 .venv/bin/pytest tests/quotas/test_golden.py`` and review the diff.
"""

import os
from dataclasses import replace
from pathlib import Path

import pytest

from quotas.policy.kueue import compile_kueue, render_yaml
from quotas.selectors import kueue_target, org_snapshot

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "sharing, name", [("classic", "kueue-k8s-west.yaml"), ("admission", "kueue-k8s-west-admission.yaml")]
)
def test_demo_compiles_to_the_golden_kueue_objects(demo, sharing, name):
    """The demo cluster as it is (classic preemption), and with Kueue's admission fair sharing."""
    # the revision stamp is the newest audit id, which differs between databases: pin it
    target = replace(kueue_target(demo), revision=0, sharing=sharing)
    text = render_yaml(compile_kueue(org_snapshot(), target))
    golden = GOLDEN / name
    if os.environ.get("ALLOT_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text()
    assert text == render_yaml(compile_kueue(org_snapshot(), target))
