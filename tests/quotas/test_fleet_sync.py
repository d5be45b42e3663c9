"""A MultiKueue fleet end to end (issue #30.5): set up through the service (audited), each cluster synced
through the official client to its own loopback API server — the manager gets its summed queues and the
MultiKueue objects, each worker its queues in the manager's namespaces — a second sync writes nothing,
and an out-of-band edit of the MultiKueueConfig is drift."""

import pytest

from quotas import services
from quotas.errors import InputError
from quotas.integrations.kubernetes import KueueClient, api_client_for
from quotas.models import AuditEvent, ClusterKind
from quotas.policy import Resource
from quotas.services.sync import cluster_sync
from tests.kube_fake import FakeKueueServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(admin_user):
    why = "fleet test"
    clusters = {
        name: services.cluster_set(actor=admin_user, reason=why, name=name, kind=ClusterKind.KUBERNETES)
        for name in ("hub", "west-1", "west-2")
    }
    flavors = {
        name: services.flavor_set(actor=admin_user, reason=why, cluster=clusters[name], name="a100",
                                  accelerator_model="A100", device_memory_gb=80, physical_devices=devices)
        for name, devices in (("west-1", 64), ("west-2", 32))
    }  # fmt: skip
    acme = services.org_unit_create(actor=admin_user, reason=why, parent=None, kind="organisation", slug="acme")
    nlp = services.org_unit_create(actor=admin_user, reason=why, parent=acme, kind="team", slug="nlp")
    changes = [
        services.QuotaChange(unit.pk, flavors[w].pk, Resource.GPU, g, b)
        for unit, (g1, g2, b) in ((acme, (64, 32, 0)), (nlp, (32, 16, 8)))
        for w, g in (("west-1", g1), ("west-2", g2))
    ]
    services.quota_set_bulk(actor=admin_user, reason=why, changes=changes)
    services.namespace_bind(actor=admin_user, reason=why, unit=nlp, cluster=clusters["hub"], namespace="nlp")
    services.fleet_set(
        actor=admin_user, reason="one queue for the region", name="west", manager=clusters["hub"],
        workers=[(clusters["west-1"], "west-1-kubeconfig"), (clusters["west-2"], "west-2-kubeconfig")],
    )  # fmt: skip
    return clusters


def sync(cluster, server, mode="apply"):
    client = KueueClient(api_client_for(f"url:{server.url}"))
    return cluster_sync(actor=None, reason="fleet sync", cluster=cluster, mode=mode, client=client)


def test_each_cluster_of_the_fleet_gets_its_objects_and_a_second_sync_writes_nothing(fleet, crd_schemas):
    assert AuditEvent.objects.filter(action="fleet_set", after__workers__0__0="west-1").exists()
    servers = {name: FakeKueueServer(crd_schemas) for name in fleet}
    for server in servers.values():
        server.__enter__()
    try:
        runs = {name: sync(fleet[name], servers[name]) for name in fleet}
        assert {name: run.status for name, run in runs.items()} == dict.fromkeys(fleet, "applied"), [
            r.message for r in runs.values()
        ]
        hub = servers["hub"].objects
        kinds = {key[0] for key in hub}
        assert {"MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck"} <= kinds
        queue = hub[("ClusterQueue", "", "acme.nlp")]
        gpu = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
        assert gpu["nominalQuota"] == "48"  # 32 on west-1 + 16 on west-2
        assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["name"] == "allot-multikueue-west"
        assert hub[("MultiKueueConfig", "", "west")]["spec"]["clusters"] == ["west-1", "west-2"]
        for worker, nominal in (("west-1", "32"), ("west-2", "16")):
            objects = servers[worker].objects
            assert ("LocalQueue", "nlp", "acme.nlp") in objects  # the manager's namespace and queue name
            own = objects[("ClusterQueue", "", "acme.nlp")]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
            assert own["nominalQuota"] == nominal and not any(k[0] == "AdmissionCheck" for k in objects)
        writes = {name: len(server.writes()) for name, server in servers.items()}
        again = {name: sync(fleet[name], servers[name]).status for name in fleet}
        assert again == dict.fromkeys(fleet, "in_sync")
        assert {name: len(server.writes()) for name, server in servers.items()} == writes

        servers["hub"].kubectl_edit(
            "MultiKueueConfig", "west", lambda o: o["spec"].update(clusters=["west-2", "west-1"])
        )
        drift = sync(fleet["hub"], servers["hub"], mode="drift_check")
        assert drift.status == "drift" and drift.counts.get("drift") == 1
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)


def test_a_fleet_kueue_would_refuse_or_a_cluster_in_two_fleets_is_refused(fleet, admin_user):
    with pytest.raises(InputError, match="hub cannot be a worker of itself"):
        services.fleet_set(
            actor=admin_user, reason="t", name="west", manager=fleet["hub"], workers=[(fleet["hub"], "s")]
        )
    other = services.cluster_set(actor=admin_user, reason="t", name="east", kind=ClusterKind.KUBERNETES)
    with pytest.raises(InputError, match="west-1 is already a worker of fleet west"):
        services.fleet_set(actor=admin_user, reason="t", name="east", manager=other, workers=[(fleet["west-1"], "s")])


def test_the_fleet_api_lists_previews_and_sets_a_fleet(fleet, admin_user):
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(admin_user)
    [listed] = api.get("/api/v1/fleets/").json()["results"]
    assert listed["manager"] == "hub" and [w["cluster"] for w in listed["workers"]] == ["west-1", "west-2"]
    preview = api.get("/api/v1/fleets/west/kueue/").json()
    assert set(preview) == {"hub", "west-1", "west-2"}
    assert any(o["kind"] == "MultiKueueConfig" for o in preview["hub"])
    reordered = {
        "name": "west", "manager": "hub", "reason": "west-2 first: it is cheaper",
        "workers": [{"cluster": "west-2", "kubeconfig_secret": "w2"}, {"cluster": "west-1", "kubeconfig_secret": "w1"}],
    }  # fmt: skip
    assert api.post("/api/v1/fleets/", reordered, format="json").status_code == 201
    config = next(o for o in api.get("/api/v1/fleets/west/kueue/").json()["hub"] if o["kind"] == "MultiKueueConfig")
    assert config["spec"]["clusters"] == ["west-2", "west-1"]
    bad = api.post("/api/v1/fleets/", {**reordered, "workers": []}, format="json")
    assert bad.status_code == 400 and "at least one worker" in str(bad.json())
    viewer = User.objects.create_user("someone")
    api.force_authenticate(viewer)
    assert api.post("/api/v1/fleets/", reordered, format="json").status_code == 403


def test_the_webhook_on_the_manager_judges_against_the_fleets_summed_quota(fleet):
    from admission.selectors import admission_policy

    rule = admission_policy(fleet["hub"]).namespaces["nlp"]
    assert rule.ceilings == {"a100": 48 + 16}  # guarantee 32 + 16 and burst 8 + 8 over both workers
    assert admission_policy(fleet["west-1"]).namespaces == {}  # a worker's namespaces are bound on the manager


def test_the_managers_webhook_reads_pins_by_the_workers_node_labels(fleet, admin_user):
    """Issue #40.4: on the manager, 28 GPUs pinned to a flavor whose summed ceiling is less are refused, and a pin
    to a flavor no worker has is refused (both were allowed: the manager's flavors carried no node labels)."""
    from admission.policy.decide import _review
    from admission.policy.device_checks import devices
    from admission.policy.review import Reason, Review
    from admission.selectors import admission_policy

    for name in ("west-1", "west-2"):
        services.flavor_set(actor=admin_user, reason="t", cluster=fleet[name], name="a100", node_labels={"gpu": "a100"})
    policy = admission_policy(fleet["hub"])
    assert {f.name: dict(f.node_labels) for f in policy.flavors} == {"a100": {"gpu": "a100"}}

    def pinned(gpus, value):
        pod = {
            "nodeSelector": {"gpu": value},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        }
        review = {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "nlp",
            "operation": "CREATE",
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {}}, "spec": pod},
        }
        judged = _review(policy, review, "object", "", "Pod", "nlp")
        assert isinstance(judged, Review), judged
        return [d.reason for d in devices(judged)]  # the device rules alone

    assert pinned(64, "a100") == []
    assert pinned(65, "a100") == [Reason.EXCEEDS_CEILING]
    assert pinned(2, "h100") == [Reason.UNKNOWN_FLAVOR]


def test_a_managers_fleet_is_imported_from_its_multikueue_objects(admin_user, tmp_path, capsys):
    """The hub of the golden fleet (tests/golden/fleet-hub.yaml) read back: its fleet, workers in order and
    their Secrets; workers Allot does not know yet are named, and nothing is set up."""
    from pathlib import Path

    from django.core.management import CommandError, call_command

    from quotas.models import Fleet

    golden = Path(__file__).resolve().parents[1] / "golden" / "fleet-hub.yaml"
    (tmp_path / "hub.yaml").write_text(golden.read_text())
    services.cluster_set(actor=admin_user, reason="t", name="hub", kind=ClusterKind.KUBERNETES)
    services.cluster_set(actor=admin_user, reason="t", name="west-1", kind=ClusterKind.KUBERNETES)
    with pytest.raises(CommandError, match="lists west-2, not clusters of Allot's yet"):
        call_command("allot_import_kueue", "--cluster", "hub", "--from-dir", str(tmp_path), "--fleet")
    assert not Fleet.objects.exists()
    services.cluster_set(actor=admin_user, reason="t", name="west-2", kind=ClusterKind.KUBERNETES)
    call_command("allot_import_kueue", "--cluster", "hub", "--from-dir", str(tmp_path), "--fleet")
    assert "fleet west: manager hub, workers west-1, west-2" in capsys.readouterr().out
    fleet = Fleet.objects.get(name="west")
    assert [(w.cluster.name, w.kubeconfig_secret) for w in fleet.workers.all()] == [
        ("west-1", "west-1-kubeconfig"),
        ("west-2", "west-2-kubeconfig"),
    ]


def test_a_managers_workload_is_charged_once_on_the_workers_flavor_to_its_unit(fleet):
    """The manager's Workload is the one charged (its copies on the workers are not): to the unit its
    namespace is bound to on the manager, on the flavor of that name (the first worker's)."""
    from accounting.models import WorkloadRecord
    from accounting.services.kueue import usage_resync_kueue
    from quotas.models import OrgUnit, ResourceFlavor
    from tests.accounting.test_kueue_usage import RUNNING, wl
    from tests.kube_watch import WatchScriptServer, list_step

    hub = fleet["hub"]
    with WatchScriptServer([list_step([wl("u-hub", "nlp", "10", RUNNING, gpus=8)], "10")]) as server:
        hub.connection_ref = f"url:{server.url}"
        run = usage_resync_kueue(cluster=hub)
    assert run.counts.get("unresolved_flavor", 0) == 0 and run.counts.get("unresolved_namespace", 0) == 0
    record = WorkloadRecord.objects.get(scheduler_id="u-hub")
    assert record.unit == OrgUnit.objects.get(path="acme/nlp")
    assert record.flavor == ResourceFlavor.objects.get(cluster__name="west-1", name="a100") and record.devices == 8
