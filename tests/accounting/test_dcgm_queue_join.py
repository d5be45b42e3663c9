"""A GPU series from a namespace bound to no unit is attributed through Kueue's pod label
``kueue.x-k8s.io/cluster-queue-name`` (issue #30.2), in the spellings the exporter and kube-state-metrics give it."""

from __future__ import annotations

import pytest

from accounting.policy.dcgm import owner_of
from accounting.services.dcgm import _resolver
from quotas import services

pytestmark = pytest.mark.django_db


def test_an_unbound_namespace_is_attributed_by_its_pods_cluster_queue(org):
    services.flavor_set(actor=org.admin, reason="t", cluster=org.cluster, name="l40s", accelerator_model="NVIDIA-L40S",
                        device_memory_gb=48, physical_devices=8)  # fmt: skip
    services.namespace_bind(actor=org.admin, reason="t", unit=org.vision, cluster=org.cluster, namespace="default")
    series = {
        "bound": {"namespace": "default", "pod": "a", "modelName": "NVIDIA-L40S"},
        "shared": {
            "namespace": "shared",
            "pod": "b",
            "modelName": "NVIDIA-L40S",
            "kueue_x_k8s_io_cluster_queue_name": org.nlp.path.replace("/", "."),
        },
        "ksm": {
            "exported_namespace": "shared",
            "exported_pod": "c",
            "modelName": "NVIDIA-L40S",
            "label_kueue_x_k8s_io_cluster_queue_name": org.nlp.path.replace("/", "."),
        },
        "unknown queue": {"namespace": "shared", "pod": "d", "kueue_x_k8s_io_cluster_queue_name": "nobody.here"},
        "no queue": {"namespace": "shared", "pod": "e"},
    }
    owners = {name: owner_of(labels) for name, labels in series.items()}
    resolve = _resolver(org.cluster, set(owners.values()))
    found = {name: resolve(owner) for name, owner in owners.items()}
    assert found["bound"][0] == org.vision.pk  # the namespace's binding comes first
    assert found["shared"][0] == org.nlp.pk and found["shared"][2] == f"ClusterQueue {org.nlp.path.replace('/', '.')}"
    assert found["ksm"][0] == org.nlp.pk
    assert found["shared"][1] is not None  # the flavor by the GPU's model, as for any pod
    assert found["unknown queue"][0] is None and found["no queue"][0] is None  # counted as unresolved, not guessed
