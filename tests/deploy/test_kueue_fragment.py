"""The Kueue configuration fragment in deploy/ copies exactly the labels the webhook puts on jobs."""

from pathlib import Path

import yaml

from admission.policy.model import GOVERNANCE_LABELS

ROOT = Path(__file__).resolve().parents[2]


def test_kueue_copies_every_governance_label_into_its_workloads():
    fragment = yaml.safe_load((ROOT / "deploy" / "kueue" / "kueue-config-fragment.yaml").read_text())
    assert (fragment["apiVersion"], fragment["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    assert fragment["integrations"]["labelKeysToCopy"] == list(GOVERNANCE_LABELS)
