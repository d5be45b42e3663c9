"""The part of Kueue's own configuration (``config.kueue.x-k8s.io/v1beta2`` ``Configuration``) a cluster
needs for what Allot compiles onto it. Pure.

Merge it into the ``kueue-manager-config`` ConfigMap (``controller_manager_config.yaml``) and restart
Kueue; Allot serves it per cluster (``GET /api/v1/clusters/{id}/kueue-config/``, ``manage.py
allot_kueue_config``), and ``deploy/kueue/kueue-config-fragment.yaml`` is the one for a classic cluster.

* ``integrations.labelKeysToCopy``: the governance labels the admission webhook puts on every job,
  copied by Kueue into each Workload it creates, so usage is attributed without asking for the owner;
* ``metrics.enableClusterQueueResources`` and ``metrics.customLabels``: ClusterQueue usage and
  reservation metrics (``kueue_cluster_queue_resource_usage`` …), each carrying the unit, department and
  cost centre Allot stamps on its Cohorts, ClusterQueues and LocalQueues as ``custom_unit``,
  ``custom_department``, ``custom_cost_centre`` (Kueue allows 6 per source kind, 20 in all; its
  ``CustomMetricLabels`` feature gate turns them on);
* under ``fair`` and ``admission``: ``fairSharing.preemptionStrategies`` — Kueue's fair sharing, so the
  compiled ``fairSharing.weight`` decide who borrows and who is preempted;
* with a shared flavor (MIG, MPS, time-slicing: quotas.policy.sharing): ``resources.transformations``,
  each slice resource replaced by its weight in millionths of a GPU-equivalent
  (``allot.dev/gpu-equivalent-millionths``) — the one currency the
  compiled queues cover for shared flavors, so slices count by weight against one quota (Kueue's
  ResourceTransformation, beta and on by default from v0.10; a Kueue without it counts a slice as a whole
  resource of its own, which the compiled queues do not cover: such work never fits);
* under ``admission``: ``admissionFairSharing`` with ``usageHalfLifeTime`` from the cluster's fair-share
  half-life. Kueue documents that 0 resets usage at once — admission fair sharing silently does
  nothing — so 0 is refused here, as in the compiler.

For a Kueue that serves only ``v1beta1`` (v0.13, v0.14: ``version="v1beta1"``) the same fragment in its
``config.kueue.x-k8s.io/v1beta1`` form: fair sharing needs ``fairSharing.enable: true`` there (v1beta2
dropped it), admission fair sharing its ``AdmissionFairSharing`` feature gate, and there are no custom
metric labels before v0.17 (left out: Kueue would refuse the field).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from ..labels import GOVERNANCE_LABELS, LABEL_COST_CENTRE, LABEL_DEPARTMENT, LABEL_UNIT
from ..sharing import EQUIVALENTS, Profile

CUSTOM_LABEL_KINDS = ("ClusterQueue", "LocalQueue", "Cohort")
PREEMPTION_STRATEGIES = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
SAMPLING_INTERVAL = "5m0s"


class KueueConfigError(ValueError):
    """The cluster's settings would give Kueue a configuration that does not do what they say."""


def go_duration(seconds: int) -> str:
    """Seconds as Kubernetes' metav1.Duration prints them: ``168h0m0s``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes}m{secs}s"


def custom_labels() -> list[dict[str, str]]:
    """Per source kind, the organisation labels promoted onto Kueue's metrics."""
    return [
        {"name": key.split("/", 1)[1].replace("-", "_"), "sourceLabelKey": key, "sourceKind": kind}
        for kind in CUSTOM_LABEL_KINDS
        for key in (LABEL_UNIT, LABEL_DEPARTMENT, LABEL_COST_CENTRE)
    ]


def kueue_configuration(
    sharing: str = "classic",
    half_life_s: int = 7 * 86400,
    *,
    label_keys: Sequence[str] = GOVERNANCE_LABELS,
    version: str = "v1beta2",
    profiles: Sequence[Profile] = (),
) -> dict[str, Any]:
    """The Configuration fragment for a cluster sharing by ``sharing`` (classic, fair, admission), in the
    configuration ``version`` its Kueue reads (v1beta2 from v0.15; v1beta1 for v0.13 and v0.14)."""
    if sharing not in ("classic", "fair", "admission"):
        raise KueueConfigError(f"sharing {sharing!r}: use classic, fair or admission")
    if version not in ("v1beta2", "v1beta1"):
        raise KueueConfigError(f"configuration version {version!r}: use v1beta2 (Kueue v0.15+) or v1beta1")
    older = version == "v1beta1"
    config: dict[str, Any] = {
        "apiVersion": f"config.kueue.x-k8s.io/{version}",
        "kind": "Configuration",
        "integrations": {"labelKeysToCopy": list(label_keys)},
        "metrics": {"enableClusterQueueResources": True}
        if older
        else {"enableClusterQueueResources": True, "customLabels": custom_labels()},
        "featureGates": {} if older else {"CustomMetricLabels": True},
    }
    if sharing in ("fair", "admission"):
        config["fairSharing"] = {"preemptionStrategies": list(PREEMPTION_STRATEGIES)}
        if older:
            config["fairSharing"] = {"enable": True, **config["fairSharing"]}
    if sharing == "admission":
        if half_life_s <= 0:
            raise KueueConfigError(
                "admission fair sharing with a usageHalfLifeTime of 0 s: Kueue resets usage at once and orders "
                "nothing by it; set the cluster's fair-share half-life (e.g. 604800 s, 7 days)"
            )
        config["admissionFairSharing"] = {
            "usageHalfLifeTime": go_duration(half_life_s),
            "usageSamplingInterval": SAMPLING_INTERVAL,
        }
        if older:
            config["featureGates"]["AdmissionFairSharing"] = True
    if profiles:
        config["resources"] = {"transformations": transformations(profiles)}
    if not config["featureGates"]:
        del config["featureGates"]
    return config


def transformations(profiles: Sequence[Profile]) -> list[dict[str, Any]]:
    """Per slice resource of the cluster's shared flavors, Kueue's ResourceTransformation into the one
    currency the queues cover: its weight in millionths of a GPU-equivalent, rounded down
    (``allot.dev/gpu-equivalent-millionths``; ``Replace``: the slice itself is no longer counted)."""
    seen: dict[str, Profile] = {}
    for profile in profiles:
        seen.setdefault(profile.resource, profile)
    return [
        {"input": name, "strategy": "Replace", "outputs": {EQUIVALENTS: str(p.micro)}}
        for name, p in sorted(seen.items())
    ]


CONFIG_KEY = "controller_manager_config.yaml"
"""The key of Kueue's ConfigMap (``kueue-manager-config``) that holds its Configuration."""


def transformation_problems(config_text: str, profiles: Sequence[Profile]) -> list[str]:
    """What a cluster's Kueue configuration (the text of its ``controller_manager_config.yaml``) lacks for the
    slices of ``profiles`` to count by weight: one line per slice resource it does not transform into the
    currency as Allot counts it (see :func:`transformations`); empty when it does."""
    try:
        config = yaml.safe_load(config_text) or {}
    except yaml.YAMLError as exc:
        return [f"its configuration is not YAML ({str(exc).splitlines()[0]})"]
    found = ((config.get("resources") or {}).get("transformations") or []) if isinstance(config, dict) else []
    have = {str(t.get("input")): t for t in found if isinstance(t, dict)}
    problems = []
    for want in transformations(profiles):
        name, outputs = want["input"], want["outputs"]
        got = have.get(name)
        if got is None:
            problems.append(f"{name} is not transformed (Kueue counts it as a resource the queues do not cover)")
        elif str(got.get("strategy") or "Retain") != "Replace":
            problems.append(
                f"{name} is kept beside its weight (strategy {got.get('strategy') or 'Retain'}, not Replace)"
            )
        elif {str(k): str(v) for k, v in (got.get("outputs") or {}).items()} != outputs:
            problems.append(f"{name} becomes {got.get('outputs')}, Allot counts it {outputs}")
    return problems
