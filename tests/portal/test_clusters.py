"""The clusters page, a run's page, and a Slurm cluster's files to load by hand."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from quotas.integrations.slurm import Sacctmgr
from quotas.models import Cluster, SyncObject, SyncOutcome, SyncRun, SyncStatus
from quotas.services.sync import cluster_sync, slurm_sync
from tests.kube_fake import FakeKueueServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(demo):
    client = Client()
    client.force_login(User.objects.get(username="viewer"))
    return client


def test_every_cluster_with_its_last_run_and_drift_check(viewer, demo, crd_schemas, django_assert_max_num_queries):
    admin = User.objects.get(username="admin")
    with FakeKueueServer(crd_schemas) as fake:
        demo.connection_ref = f"url:{fake.url}"
        demo.save()
        applied = cluster_sync(actor=admin, reason="first", cluster=demo)
        drift = cluster_sync(actor=admin, reason="check", cluster=demo, mode="drift_check")
    slurm = Cluster.objects.get(name="slurm-lab")
    failed = slurm_sync(actor=admin, reason="t", cluster=slurm, runner=Sacctmgr(binary="/nonexistent/sacctmgr"))
    with django_assert_max_num_queries(8):  # the same with one cluster or a hundred
        page = viewer.get("/clusters/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'href="/sync-runs/{drift.pk}/"' in html and f'href="/sync-runs/{failed.pk}/"' in html
    assert f'href="/sync-runs/{applied.pk}/"' not in html  # the drift check is k8s-west's latest run
    assert "Failed: the cluster could not be read or written" in html and "In sync (no change needed)" in html
    assert 'href="/clusters/slurm-lab/slurm/dump/"' in html
    written = viewer.get(f"/sync-runs/{applied.pk}/").content.decode()
    assert "Written" in written and "ClusterQueue <strong>acme.research.nlp</strong>" in written
    assert "is not installed" in viewer.get(f"/sync-runs/{failed.pk}/").content.decode()


def test_a_run_page_lists_what_needs_attention_first(viewer, demo):
    run = SyncRun.objects.create(
        cluster=Cluster.objects.get(name="slurm-lab"),
        mode="apply",
        status=SyncStatus.PARTIAL,
        started_at=timezone.now(),
        actor_name="system",
        reason="scheduled sync",
        message="2 object(s) written, 1 delete(s) blocked by running jobs; the next sync retries them",
    )
    SyncObject.objects.bulk_create(
        [
            SyncObject(run=run, kind="qos", name="guar-nlp", outcome=SyncOutcome.UPDATED,
                       changes=[{"path": "grptres", "desired": {"gres/gpu:h100": 3}, "actual": {"gres/gpu:h100": 2}}]),
            SyncObject(run=run, kind="account", name="scratch", outcome=SyncOutcome.BLOCKED,
                       message="sacctmgr -i delete account where name=scratch cluster=lab → rc=1: Job(s) active"),
            SyncObject(run=run, kind="qos", name="guar-llm", outcome=SyncOutcome.UNCHANGED),
            SyncObject(run=run, kind="account", name="speech", outcome=SyncOutcome.CREATED,
                       details={"file": "Cluster - 'lab'\nParent - 'research'\nAccount - 'speech'"}),
        ]
    )  # fmt: skip
    html = viewer.get(f"/sync-runs/{run.pk}/").content.decode()
    assert html.index("Needs attention") < html.index("scratch") < html.index("Written") < html.index("guar-nlp")
    assert "1 object unchanged (not listed)" in html and "guar-llm" not in html
    assert "<code>grptres</code>:" in html and "Job(s) active" in html
    assert "the partial dump loaded in this call" in html and "Parent - &#x27;research&#x27;" in html
    assert viewer.get("/sync-runs/999999/").status_code == 404


def test_a_slurm_clusters_dump_and_qos_script_as_text(viewer):
    dump = viewer.get("/clusters/slurm-lab/slurm/dump/")
    assert dump.status_code == 200 and dump["Content-Type"].startswith("text/plain")
    assert "Account - 'nlp':Description='team acme/research/nlp'" in dump.content.decode()
    assert 'filename="lab.cfg"' in dump["Content-Disposition"]
    qos = viewer.get("/clusters/slurm-lab/slurm/qos/").content.decode()
    assert qos.startswith("#!/bin/sh") and "sacctmgr -i add qos" in qos
    assert viewer.get("/clusters/k8s-west/slurm/dump/").status_code == 404
    assert viewer.get("/clusters/slurm-lab/slurm/other/").status_code == 404
    assert Client().get("/clusters/").status_code == 302  # sign in first
