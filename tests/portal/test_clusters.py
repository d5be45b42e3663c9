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
    with django_assert_max_num_queries(11):  # the same with one cluster or a hundred (recent runs, fleets: 3)
        page = viewer.get("/clusters/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'href="/sync-runs/{drift.pk}/"' in html and f'href="/sync-runs/{failed.pk}/"' in html
    last, recent = html.split('id="recent-k8s-west"', 1)
    assert f'href="/sync-runs/{applied.pk}/"' not in last  # the drift check is k8s-west's latest run …
    assert f'href="/sync-runs/{applied.pk}/"' in recent.split("</td>", 1)[0]  # … the sync among its recent ones
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


def signed_in_as(username):
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def test_an_admin_starts_a_dry_run_from_the_page_and_it_is_theirs_in_the_history(
    demo, crd_schemas, monkeypatch, django_capture_on_commit_callbacks
):
    from config.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)  # the demo's way: in-process, after commit
    admin = signed_in_as("admin")
    with FakeKueueServer(crd_schemas) as fake:
        demo.connection_ref = f"url:{fake.url}"
        demo.save()
        page = admin.get("/clusters/").content.decode()
        assert 'action="/clusters/k8s-west/start/"' in page and ">Sync now</button>" in page
        assert "none yet" in page.split('id="recent-k8s-west"', 1)[1].split("</td>", 1)[0]
        with_no_reason = admin.post("/clusters/k8s-west/start/", {"mode": "dry_run", "reason": ""}, follow=True)
        assert "reason" in with_no_reason.content.decode().lower() and not SyncRun.objects.exists()
        with django_capture_on_commit_callbacks(execute=True):
            admin.post("/clusters/k8s-west/start/", {"mode": "dry_run", "reason": "before the window"})
        done = admin.get("/clusters/")
    assert "A dry run of k8s-west was started" in done.content.decode()
    run = SyncRun.objects.get()
    assert (run.mode, run.actor_name, run.reason) == ("dry_run", "admin", "before the window")
    recent = done.content.decode().split('id="recent-k8s-west"', 1)[1].split("</td>", 1)[0]
    assert f'href="/sync-runs/{run.pk}/"' in recent and "by admin" in recent


def test_only_a_platform_admin_may_start_a_run_and_never_on_a_switched_off_cluster(demo):
    viewer = signed_in_as("viewer")
    assert "/clusters/k8s-west/start/" not in viewer.get("/clusters/").content.decode()  # no buttons to press
    assert viewer.post("/clusters/k8s-west/start/", {"mode": "apply", "reason": "x"}).status_code == 403
    assert signed_in_as("admin").get("/clusters/k8s-west/start/").status_code == 405
    demo.enabled = False
    demo.save()
    off = signed_in_as("admin").post("/clusters/k8s-west/start/", {"mode": "apply", "reason": "x"}, follow=True)
    assert "is not synced here" in off.content.decode() and not SyncRun.objects.exists()
    odd = signed_in_as("admin").post("/clusters/slurm-lab/start/", {"mode": "everything", "reason": "x"}, follow=True)
    assert "nothing started" in odd.content.decode()


def test_the_fleets_are_on_the_clusters_page_with_their_workers_in_order(demo, viewer):
    from quotas import services

    admin = User.objects.get(username="admin")
    hub = services.cluster_set(actor=admin, reason="t", name="hub", kind="kubernetes", display_name="Hub")
    west2 = services.cluster_set(actor=admin, reason="t", name="west-2", kind="kubernetes", display_name="W2")
    services.fleet_set(actor=admin, reason="one queue", name="west", manager=hub,
                       workers=[(west2, "west-2-kubeconfig"), (demo, "k8s-west-kubeconfig")])  # fmt: skip
    html = viewer.get("/clusters/").content.decode()
    fleet = html.split('id="fleet-west"', 1)[1].split("</div>", 1)[0]
    assert "manager <strong>hub</strong>" in fleet
    assert fleet.index("1. <strong>west-2</strong>") < fleet.index("2. <strong>k8s-west</strong>")
    assert "Secret k8s-west-kubeconfig" in fleet
