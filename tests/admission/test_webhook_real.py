"""Allot's admission webhooks registered on a real kube-apiserver exactly as deploy/kubernetes/base/webhook.yaml
ships them (in url: form: no Service or DNS here), the API server presenting its token as production's
AdmissionConfiguration does (issue #40.1)."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest
from django.test import override_settings

from quotas.models import NamespaceBinding, SyncStatus
from quotas.services.sync import cluster_sync
from tests.kube_cluster import WEBHOOK_TOKEN
from tests.kube_work import WebhookServer, namespace, registered_webhooks

pytestmark = [pytest.mark.kube, pytest.mark.django_db(transaction=True)]
REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy/kubernetes/base/webhook.yaml"


def pod(name: str, ns: str, *, gpus: int = 0, owner: str | None = None) -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    meta: dict = {"name": name, "namespace": ns}
    if owner:  # as the daemon-set or replica-set controller makes them
        kind, owner_name = owner.split("/")
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": kind,
                "name": owner_name,
                "uid": "00000000-0000-0000-0000-000000000001",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]},
    }


def create(plane, obj) -> tuple[int, str]:
    """POST through the API server as the admin: (status, message)."""
    path = f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods"
    try:
        plane.request("POST", path, obj)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}").get("message", "")
    return 201, ""


@pytest.fixture
def webhooks(kube_plane, demo):
    """k8s-west synced to the plane (which labels its bound namespaces), Allot serving its webhooks, and the
    shipped webhook configurations registered; removed again afterwards (other tests create pods too)."""
    from admission.runtime import STATE

    for ns in NamespaceBinding.objects.filter(cluster=demo).values_list("namespace", flat=True):
        namespace(kube_plane, ns)
    from tests.quotas.test_kube_real import shipped_rbac

    shipped_rbac(kube_plane)
    demo.connection_ref = f"kubeconfig:{kube_plane.sync_kubeconfig}"
    demo.save()
    assert cluster_sync(actor=None, reason="t", cluster=demo).status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC)
    settings = {
        "ALLOT_ADMISSION_AUTH": "token",
        "ALLOT_ADMISSION_TOKEN": WEBHOOK_TOKEN,
        "ALLOT_ADMISSION_CLUSTER": demo.name,
        "ALLOT_ADMISSION_BACKGROUND": False,
        "ALLOWED_HOSTS": ["*"],
    }
    registered: list[str] = []
    with override_settings(**settings):
        STATE.policy = None  # loaded from this test's database at the first call
        server = WebhookServer(kube_plane)

        def register(**selector):
            for config in registered_webhooks(kube_plane, MANIFEST, **selector):
                kube_plane.apply_manifest(config)
                registered.append(_path(config))

        try:
            yield register
        finally:
            for path in registered:
                kube_plane.delete(path)
            server.close()
            STATE.policy = None
            STATE.pending.clear()


def _path(config: dict) -> str:
    plural = (
        "validatingwebhookconfigurations"
        if config["kind"].startswith("Validating")
        else "mutatingwebhookconfigurations"
    )
    return f"/apis/admissionregistration.k8s.io/v1/{plural}/{config['metadata']['name']}"


def test_the_clusters_own_pods_are_never_blocked_and_team_gpu_pods_are_still_judged(kube_plane, webhooks):
    webhooks()  # the namespaceSelector as shipped: allot.dev/governed=true
    for ns in ("gpu-operator", "monitoring", "cert-manager"):
        namespace(kube_plane, ns)
    assert create(
        kube_plane, pod("nvidia-device-plugin-x1", "gpu-operator", owner="DaemonSet/nvidia-device-plugin")
    ) == (201, "")
    assert create(kube_plane, pod("prometheus-0", "monitoring", owner="ReplicaSet/prometheus-7d9")) == (201, "")
    assert create(kube_plane, pod("cert-manager-5f", "cert-manager", owner="ReplicaSet/cert-manager-5f")) == (201, "")
    # a GPU pod in a team's namespace is sent and judged: no owner, project or tier labels
    status, message = create(kube_plane, pod("bare", "nlp", gpus=2))
    assert status in (400, 403) and "Allot [" in message and "admission webhook" in message, (status, message)


def test_with_every_namespace_sent_only_gpu_requests_in_ungoverned_namespaces_are_refused(kube_plane, webhooks):
    """An operator who widens the selector (every namespace but the system ones): still no system pod is blocked;
    a GPU pod where no team holds the namespace is refused, naming the fix."""
    webhooks(matchExpressions=[{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}])
    namespace(kube_plane, "gpu-operator")
    namespace(kube_plane, "scratch")
    assert create(kube_plane, pod("dcgm-exporter-x1", "gpu-operator", owner="DaemonSet/dcgm-exporter")) == (201, "")
    status, message = create(kube_plane, pod("gpu", "scratch", gpus=1))
    assert status in (400, 403) and "[namespace_unbound]" in message and "bind the namespace" in message


def test_a_workload_written_by_hand_on_a_v1beta1_kueue_is_sent_mutated_in_its_own_spelling_and_judged(
    kube_plane, webhooks
):
    """The plane's Kueue (v0.13) serves Workloads in kueue.x-k8s.io/v1beta1 only: with the shipped rule naming
    v1beta2 alone, a Workload a person creates there was never sent (issue #40). Now it is: the mutating
    webhook fills in the queue and the tier's priority class in v1beta1's fields (v1beta2's priorityClassRef
    would be pruned), and one larger than the team may ever hold is refused."""
    webhooks()
    base = "/apis/kueue.x-k8s.io/v1beta1/namespaces/nlp/workloads"

    def workload(name: str, count: int) -> dict:
        container = {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {
                "name": name,
                "labels": {"allot.dev/owner": "alice", "allot.dev/project": "nlp"},
                "annotations": {"allot.dev/checkpoint-every": "15m"},  # nlp's default tier is opportunistic
            },
            "spec": {"podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": [container],
                                                                                          "restartPolicy": "Never"}}}]},
        }  # fmt: skip

    try:
        try:
            created = kube_plane.request("POST", base, workload("by-hand", 1))
        except urllib.error.HTTPError as exc:
            raise AssertionError(exc.read().decode()) from exc
        spec, labels = created["spec"], created["metadata"]["labels"]
        assert spec["queueName"] and spec["priorityClassName"].startswith("allot-"), spec
        assert spec["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
        assert isinstance(spec["priority"], int)  # the CRD refuses a class without it
        assert labels["allot.dev/tier"] and labels["allot.dev/contract"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            kube_plane.request("POST", base, workload("too-large", 10_000))
        message = json.loads(refused.value.read() or b"{}").get("message", "")
        assert refused.value.code == 403 and "[exceeds_ceiling]" in message, message
    finally:
        kube_plane.delete(f"{base}/by-hand")
