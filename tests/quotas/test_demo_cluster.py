"""The demo's simulated Kubernetes cluster (quotas/integrations/demo_cluster.py): Allot's real sync, dry run
and drift check against a store that answers as an API server with Kueue's CRDs would, so `./dev run`
shows clusters with a history (issue #42)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from quotas.integrations import demo_cluster
from quotas.models import DriftPolicy, SyncMode, SyncOutcome, SyncRun, SyncStatus
from quotas.services.sync import cluster_sync


@pytest.fixture
def store(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    return tmp_path


def test_the_demo_cluster_gets_a_first_sync_a_persons_edit_its_drift_and_a_dry_run_refused_for_it(demo, store):
    call_command("allot_demo_clusters")
    applied, drift, dry = SyncRun.objects.filter(cluster=demo).order_by("started_at", "id")
    client = demo_cluster.DemoKueueClient(demo.connection_ref)
    on_cluster = sum(len(client.list_managed(kind)) for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue"))
    assert applied.mode == SyncMode.APPLY and applied.status == SyncStatus.APPLIED
    assert applied.actor_name == "admin" and applied.results.filter(outcome=SyncOutcome.CREATED).count() >= on_cluster
    assert on_cluster > 20
    assert drift.status == SyncStatus.DRIFT and drift.actor_name == "system"
    [edited] = drift.results.filter(outcome=SyncOutcome.DRIFT)
    assert edited.kind == "ClusterQueue" and "nominalQuota" in str(edited.changes)
    assert dry.status == SyncStatus.PARTIAL
    [refused] = dry.results.exclude(outcome__in=[SyncOutcome.UNCHANGED])
    assert (refused.kind, refused.name) == (edited.kind, edited.name)
    assert "kubectl-edit" in refused.message and "drift policy to correct" in refused.message
    # once: a second call leaves the history alone
    call_command("allot_demo_clusters")
    assert SyncRun.objects.filter(cluster=demo).count() == 3


def test_correcting_takes_the_edited_field_back_and_then_the_cluster_is_in_sync(demo, store):
    call_command("allot_demo_clusters")
    demo.drift_policy = DriftPolicy.CORRECT
    demo.save()
    corrected = cluster_sync(actor=None, reason="t", cluster=demo, mode=SyncMode.DRIFT_CHECK)
    assert corrected.status == SyncStatus.APPLIED and corrected.results.filter(outcome=SyncOutcome.UPDATED).count() == 1
    demo.drift_policy = DriftPolicy.REPORT
    demo.save()
    assert cluster_sync(actor=None, reason="t", cluster=demo, mode=SyncMode.DRIFT_CHECK).status == SyncStatus.IN_SYNC


def test_the_store_answers_as_a_server_would(store):
    client = demo_cluster.DemoKueueClient("demo:west")
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "a100", "labels": {"app.kubernetes.io/managed-by": "allot"}},
        "spec": {"nodeLabels": {"gpu": "a100"}},
    }
    client.apply(flavor, dry_run=True)
    assert client.get("ResourceFlavor", "a100") is None  # a dry run stores nothing
    client.apply(flavor)
    client.apply({**flavor, "metadata": {"name": "theirs"}})
    assert [o["metadata"]["name"] for o in client.list_managed("ResourceFlavor")] == ["a100"]
    assert len(client.list_all("ResourceFlavor")) == 2
    field = demo_cluster.person_edit(
        "west", "ResourceFlavor", "a100", lambda spec: spec.update(nodeLabels={}) or ".spec"
    )
    with pytest.raises(demo_cluster.ClusterCallError) as refused:
        client.apply(flavor)
    assert refused.value.status == 409 and refused.value.causes[0]["field"] == field
    assert (client.get("ResourceFlavor", "a100") or {}).get("spec") == {"nodeLabels": {}}
    client.apply(flavor, force=True)
    assert (client.get("ResourceFlavor", "a100") or {}).get("spec") == flavor["spec"]
    client.apply({**flavor, "spec": {"nodeLabels": {"gpu": "other"}}})  # Allot's own field again: no conflict
    assert client.delete("ResourceFlavor", "a100") and not client.delete("ResourceFlavor", "a100")
    client.govern_namespace("nlp", "west", governed=True)
    client.govern_namespace("old", "west", governed=False)
    assert client.governed_namespaces("west") == {"nlp"} and client.governed_namespaces("east") == set()
    assert {crd["spec"]["names"]["kind"] for crd in client.read_crds()} >= {"ClusterQueue", "LocalQueue"}


def test_a_demo_connection_elsewhere_says_it_has_no_api_server():
    from quotas.integrations.kubernetes import api_client_for

    with pytest.raises(ValueError, match="demo's simulated cluster"):
        api_client_for("demo:k8s-west")
