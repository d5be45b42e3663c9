"""What a sync says of a cluster's shared flavors: whether its Kueue counts their slices by weight — Kueue's own
configuration, read from its ConfigMap, checked against the transformations Allot serves (quotas.policy.kueue.config).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from quotas.integrations.kubernetes import ClusterCallError, KueueClient
from quotas.models import Cluster
from quotas.policy.kueue.config import CONFIG_KEY, transformation_problems


def slices_note(cluster: Cluster, client: KueueClient, shared: list[Any]) -> str:
    """Whether this cluster's Kueue counts the shared flavors' slices by weight: its own configuration, read from
    its ConfigMap (``ALLOT_KUEUE_CONFIG_MAP``), checked against the transformations Allot serves for them."""
    where = settings.ALLOT_KUEUE_CONFIG_MAP
    namespace, _, name = where.partition("/")
    names = ", ".join(f.name for f in shared)
    fix = f"merge GET /api/v1/clusters/{cluster.name}/kueue-config/ into it and restart Kueue"
    try:
        data = client.config_map(namespace, name)
    except ClusterCallError as exc:
        return (
            f"shared flavor(s) {names}: Kueue's configuration ({where}) could not be read ({exc}), so whether it "
            f"counts slices by weight is unknown: it does only with Allot's transformations ({fix})"
        )
    if data is None or CONFIG_KEY not in data:
        return (
            f"shared flavor(s) {names}: no Kueue configuration at {where} ({CONFIG_KEY}): slices count by weight "
            f"only where Kueue's configuration carries Allot's transformations ({fix}; or set ALLOT_KUEUE_CONFIG_MAP)"
        )
    problems = transformation_problems(data[CONFIG_KEY], [p for f in shared for p in f.sharing.profiles])
    if problems:
        return (
            f"shared flavor(s) {names}: this cluster's Kueue does not count slices by weight — in {where}, "
            f"{'; '.join(problems)}: {fix}"
        )
    return f"shared flavor(s) {names}: this cluster's Kueue counts slices by weight ({where} transforms each one)"
