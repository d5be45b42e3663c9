"""The Kueue configuration fragment in deploy/ is the classic cluster's, as Allot serves it: it copies exactly
the labels the webhook puts on jobs and promotes the organisation's labels onto Kueue's metrics."""

from pathlib import Path

import yaml

from quotas.policy.kueue.config import kueue_configuration
from quotas.policy.labels import GOVERNANCE_LABELS

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_fragment_is_the_classic_clusters():
    fragment = yaml.safe_load((ROOT / "deploy" / "kueue" / "kueue-config-fragment.yaml").read_text())
    assert fragment == kueue_configuration("classic")
    assert (fragment["apiVersion"], fragment["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    assert fragment["integrations"]["labelKeysToCopy"] == list(GOVERNANCE_LABELS)
    assert "fairSharing" not in fragment and "admissionFairSharing" not in fragment
