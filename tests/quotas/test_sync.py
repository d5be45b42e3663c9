"""Sync of the demo organisation to a cluster, through the official client, end to end."""

import pytest

from quotas import services
from quotas.integrations.kubernetes import KueueClient, api_client_for
from quotas.models import AuditEvent, DriftPolicy, Quota, SyncObject, SyncOutcome, SyncStatus
from quotas.policy import Resource
from quotas.services.sync import cluster_sync
from tests.kube_fake import FakeKueueServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake(crd_schemas):
    with FakeKueueServer(crd_schemas) as server:
        yield server


def sync(cluster, fake, mode="apply", reason="test sync"):
    return cluster_sync(
        actor=None, reason=reason, cluster=cluster, mode=mode, client=KueueClient(api_client_for(f"url:{fake.url}"))
    )


def outcomes(run):
    return dict(run.counts)


def test_first_sync_creates_everything_and_a_second_writes_nothing(demo, fake):
    run = sync(demo, fake)
    assert run.status == SyncStatus.APPLIED, run.message
    assert outcomes(run) == {"created": 45}
    assert len(fake.writes()) == 45
    kinds = [o.kind for o in SyncObject.objects.filter(run=run)]
    assert kinds.index("Cohort") > kinds.index("ResourceFlavor") and kinds.index("LocalQueue") > kinds.index(
        "ClusterQueue"
    )
    assert AuditEvent.objects.filter(action="cluster_sync").count() == 1
    before = len(fake.writes())
    again = sync(demo, fake)
    assert again.status == SyncStatus.IN_SYNC and outcomes(again) == {"unchanged": 45}
    assert len(fake.writes()) == before  # not a single write request


def test_bound_namespaces_are_labelled_for_the_webhooks_and_an_unbound_one_loses_the_label(demo, fake):
    """Issue #40.1: the admission webhooks are sent only namespaces labelled allot.dev/governed=true; the sync sets
    the label on each bound namespace (its own field manager, labels only) and takes it off when unbound."""
    from quotas.models import NamespaceBinding

    run = sync(demo, fake)
    bound = set(NamespaceBinding.objects.filter(cluster=demo).values_list("namespace", flat=True))
    governed = {n for n, labels in fake.namespace_labels.items() if labels.get("allot.dev/governed") == "true"}
    assert governed == bound and fake.namespace_labels["nlp"]["allot.dev/cluster"] == "k8s-west"
    assert set(fake.requests_by_manager) == {"allot-namespaces"}
    assert "admission governs" in run.message
    writes = len(fake.namespace_writes())
    sync(demo, fake)
    assert len(fake.namespace_writes()) == writes  # labelled once
    binding = NamespaceBinding.objects.get(cluster=demo, namespace="speech")
    services.namespace_unbind(actor=None, reason="t", unit=binding.unit, cluster=demo, namespace="speech")
    again = sync(demo, fake)
    assert fake.namespace_labels["speech"] == {} and "speech (no longer bound)" in again.message


def test_a_quota_change_updates_exactly_its_objects(demo, fake):
    sync(demo, fake)
    quota = Quota.objects.get(unit__path="acme/research/rl", flavor__name="a100-80gb", resource="nvidia.com/gpu")
    services.quota_set(
        actor=None,
        reason="more for rl",
        unit_id=quota.unit_id,
        flavor_id=quota.flavor_id,
        resource=Resource(quota.resource),
        guarantee=20,
    )
    run = sync(demo, fake)
    updated = SyncObject.objects.filter(run=run, outcome=SyncOutcome.UPDATED)
    # rl's queue (nominal 18 → 20) and research's cohort (its residual guarantee shrinks by 2)
    assert sorted((o.kind, o.name) for o in updated) == [
        ("ClusterQueue", "acme.research.rl"),
        ("Cohort", "acme.research"),
    ]
    by_kind = {o.kind: {c["path"]: (c["desired"], c["actual"]) for c in o.changes} for o in updated}
    assert by_kind["ClusterQueue"] == {"spec.resourceGroups[0].flavors[2].resources[2].nominalQuota": ("20", "18")}
    assert by_kind["Cohort"] == {
        "spec.resourceGroups[0].flavors[2].resources[2].nominalQuota": ("7", "9")
    }  # 180 − (81 + 54 + 20 + 18) = 7
    assert outcomes(run) == {"unchanged": 43, "updated": 2}


def test_dry_run_writes_nothing(demo, fake):
    run = sync(demo, fake, mode="dry_run")
    assert run.status == SyncStatus.WOULD_CHANGE and outcomes(run) == {"would_create": 45}
    assert fake.writes() == [] and fake.objects == {}


def test_kubectl_edit_is_found_as_drift_and_reported(demo, fake):
    sync(demo, fake)

    def edit(obj):
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "99"

    fake.kubectl_edit("ClusterQueue", "acme.research.speech", edit)
    run = sync(demo, fake, mode="drift_check")
    assert run.status == SyncStatus.DRIFT
    [drift] = SyncObject.objects.filter(run=run, outcome=SyncOutcome.DRIFT)
    assert drift.name == "acme.research.speech"
    assert drift.changes == [
        {"path": "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota", "desired": "9", "actual": "99"}
    ]
    # a normal sync does not override someone else's field: the server's 409, reported as drift (a person's
    # edit, issue #40.7: "conflict" is another controller's), nothing forced
    run = sync(demo, fake)
    [conflict] = SyncObject.objects.filter(run=run, outcome=SyncOutcome.DRIFT)
    assert 'conflict with "kubectl-edit"' in conflict.message and conflict.details["status"] == 409
    assert ".spec.resourceGroups of ClusterQueue acme.research.speech was changed by kubectl-edit" in conflict.message
    assert "PATCH /api/v1/clusters/k8s-west/ with drift_policy=correct" in conflict.message


def test_one_conflicting_object_does_not_block_an_unrelated_quota_change(demo, fake):
    """Issue #15.1: after one out-of-band edit every later sync refused everything."""
    sync(demo, fake)
    fake.kubectl_edit(
        "ClusterQueue",
        "acme.research.speech",
        lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2].update(nominalQuota="99"),
    )
    rl = Quota.objects.get(unit__path="acme/research/rl", flavor__name="a100-80gb", resource="nvidia.com/gpu")
    services.quota_set(
        actor=None,
        reason="more for rl",
        unit_id=rl.unit_id,
        flavor_id=rl.flavor_id,
        resource=Resource.GPU,
        guarantee=20,
    )
    run = sync(demo, fake)
    assert run.status == SyncStatus.PARTIAL and "1 object(s) failed, 2 written" in run.message
    assert outcomes(run) == {"drift": 1, "updated": 2, "unchanged": 42}
    stored = fake.objects[("ClusterQueue", "", "acme.research.rl")]
    assert stored["spec"]["resourceGroups"][0]["flavors"][2]["resources"][2]["nominalQuota"] == "20"
    # following the advice settles it: drift policy correct, then a drift sync takes the field over
    demo.drift_policy = DriftPolicy.CORRECT
    demo.save()
    assert sync(demo, fake, mode="drift_check").status == SyncStatus.APPLIED
    assert sync(demo, fake).status == SyncStatus.IN_SYNC


def test_drift_is_corrected_when_the_cluster_says_so(demo, fake):
    sync(demo, fake)
    fake.kubectl_edit(
        "ClusterQueue",
        "acme.research.speech",
        lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2].update(nominalQuota="99"),
    )
    demo.drift_policy = DriftPolicy.CORRECT
    demo.save()
    run = sync(demo, fake, mode="drift_check")
    assert run.status == SyncStatus.APPLIED and outcomes(run) == {"unchanged": 44, "updated": 1}
    stored = fake.objects[("ClusterQueue", "", "acme.research.speech")]
    assert stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == "9"
    assert sync(demo, fake, mode="drift_check").status == SyncStatus.IN_SYNC


def test_an_object_with_our_name_that_is_not_ours_is_left_alone(demo, fake):
    fake.put_unmanaged(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "acme.research.rl"},
            "spec": {"resourceGroups": []},
        }
    )
    run = sync(demo, fake)
    assert run.status == SyncStatus.PARTIAL and "2 object(s) failed" in run.message  # not "in sync" (#15.8)
    not_ours, queue = SyncObject.objects.filter(run=run, outcome=SyncOutcome.NOT_OURS).order_by("kind")
    assert (not_ours.kind, not_ours.name) == ("ClusterQueue", "acme.research.rl") and "helm" in not_ours.message
    # its LocalQueue is not pointed at the foreign queue (#15.4): that namespace gets no foreign quota
    assert (
        queue.kind == "LocalQueue" and "points at ClusterQueue acme.research.rl, which is not Allot's" in queue.message
    )
    assert ("LocalQueue", queue.namespace, queue.name) not in fake.objects
    assert fake.objects[("ClusterQueue", "", "acme.research.rl")]["spec"] == {
        "resourceGroups": [],
        "stopPolicy": "None",
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
    }


def test_archiving_a_unit_deletes_only_its_objects(demo, fake):
    sync(demo, fake)
    fake.put_unmanaged(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "site-pool"}, "spec": {}}
    )
    from quotas.models import OrgUnit

    services.org_unit_archive(actor=None, reason="team dissolved", unit=OrgUnit.objects.get(path="acme/research/rl"))
    run = sync(demo, fake)
    deleted = sorted(
        (o.kind, o.namespace, o.name) for o in SyncObject.objects.filter(run=run, outcome=SyncOutcome.DELETED)
    )
    assert deleted == [("ClusterQueue", "", "acme.research.rl"), ("LocalQueue", "rl", "acme.research.rl")]
    assert ("Cohort", "", "site-pool") in fake.objects


def test_a_missing_namespace_is_reported_per_object(demo, crd_schemas):
    with FakeKueueServer(crd_schemas, namespaces={"nlp"}) as fake:
        run = sync(demo, fake)
    assert run.status == SyncStatus.PARTIAL  # the LocalQueues with a namespace fail, the rest is applied (#15.5)
    errors = SyncObject.objects.filter(run=run, outcome=SyncOutcome.ERROR)
    assert errors.count() == 14
    for error in errors:
        assert error.message.startswith(f"namespace {error.namespace} does not exist on k8s-west: create it")
    assert outcomes(run) == {"error": 14, "created": 31} and len(fake.writes()) == 31


def test_unauthorised_and_unreachable_clusters(demo, crd_schemas):
    with FakeKueueServer(crd_schemas, token="secret") as fake:
        run = sync(demo, fake)
    assert run.status == SyncStatus.FAILED and "401 Unauthorized" in run.message
    run = cluster_sync(
        actor=None, reason="t", cluster=demo, client=KueueClient(api_client_for("url:http://127.0.0.1:9"))
    )
    assert run.status == SyncStatus.FAILED and "cannot reach the API server" in run.message
    demo.connection_ref = "ftp:nowhere"
    run = cluster_sync(actor=None, reason="t", cluster=demo)
    assert run.status == SyncStatus.FAILED and "kubeconfig:/path" in run.message


def test_invalid_compiled_objects_are_never_applied(demo, fake):
    from quotas.models import ResourceFlavor

    ResourceFlavor.objects.filter(name="h100-80gb").update(tolerations=[{"operator": "Sometimes"}])
    run = sync(demo, fake)
    assert run.status == SyncStatus.INVALID and fake.writes() == []
    problems = SyncObject.objects.filter(run=run, outcome=SyncOutcome.INVALID)
    assert {p.name for p in problems} == {"h100-80gb"}
    assert any("supported toleration values: 'Equal'(default), 'Exists'" in p.message for p in problems)
    assert all(p.message.startswith("spec.tolerations: ") and p.message.endswith("(cel)") for p in problems)


def test_kueues_reported_usage_is_kept_and_shown(demo, fake, client):
    from django.contrib.auth.models import User

    from quotas.models import QueueUsage

    sync(demo, fake)
    queue = fake.objects[("ClusterQueue", "", "acme.research.rl")]
    queue["status"] = {
        "flavorsUsage": [
            {
                "name": "a100-80gb",
                "resources": [
                    {"name": "nvidia.com/gpu", "total": "12", "borrowed": "0"},
                    {"name": "cpu", "total": "96", "borrowed": "0"},
                    {"name": "example.com/fpga", "total": "1"},
                ],
            }
        ]
    }
    sync(demo, fake, mode="drift_check")
    rows = {
        (u.flavor, u.resource): (u.total, u.unit and u.unit.path) for u in QueueUsage.objects.select_related("unit")
    }
    assert rows == {
        ("a100-80gb", "nvidia.com/gpu"): (12, "acme/research/rl"),
        ("a100-80gb", "cpu"): (96_000, "acme/research/rl"),
    }
    client.force_login(User.objects.get(username="viewer"))
    assert "k8s-west/a100-80gb 18/27 · 12 in use" in client.get("/").content.decode()
    rl = QueueUsage.objects.get(resource="nvidia.com/gpu").unit_id
    page = client.get(f"/units/{rl}/").content.decode()
    assert "<td>12</td>" in page and "allocated 12" in page
    sync(demo, fake, mode="drift_check")  # a newer read replaces the old one
    assert QueueUsage.objects.count() == 2


def test_the_command_says_what_happened_in_its_exit_code(demo, fake):
    """Issue #15.8: --drift exited 0 with drift found; distinct codes, documented in --help."""
    from django.core.management import CommandError, call_command

    demo.connection_ref = f"url:{fake.url}"
    demo.save()
    call_command("allot_sync", "--cluster", "k8s-west")  # applied: 0
    fake.kubectl_edit(
        "ClusterQueue",
        "acme.research.speech",
        lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2].update(nominalQuota="99"),
    )
    with pytest.raises(CommandError) as drift:
        call_command("allot_sync", "--cluster", "k8s-west", "--drift")
    assert drift.value.returncode == 3 and "Drift found" in str(drift.value)
    with pytest.raises(CommandError) as partial:
        call_command("allot_sync", "--cluster", "k8s-west")
    assert partial.value.returncode == 4 and "1 object(s) failed" in str(partial.value)
    with pytest.raises(CommandError) as would:
        call_command("allot_sync", "--cluster", "k8s-west", "--dry-run")  # the dry run says it would be refused
    assert would.value.returncode == 4


def test_a_stop_policy_set_out_of_band_is_drift_and_correction_resets_it(demo, fake):
    """Issue #15.2: `stopPolicy: HoldAndDrain` (which evicts every workload of the queue) was "in sync"."""
    sync(demo, fake)
    fake.kubectl_edit("ClusterQueue", "acme.research.speech", lambda o: o["spec"].update(stopPolicy="HoldAndDrain"))
    run = sync(demo, fake, mode="drift_check")
    [drift] = SyncObject.objects.filter(run=run, outcome=SyncOutcome.DRIFT)
    assert run.status == SyncStatus.DRIFT and drift.changes == [
        {"path": "spec.stopPolicy", "desired": "None", "actual": "HoldAndDrain"}
    ]
    demo.drift_policy = DriftPolicy.CORRECT
    demo.save()
    assert sync(demo, fake, mode="drift_check").status == SyncStatus.APPLIED
    assert fake.objects[("ClusterQueue", "", "acme.research.speech")]["spec"]["stopPolicy"] == "None"
    assert sync(demo, fake, mode="drift_check").status == SyncStatus.IN_SYNC


def test_another_clusters_objects_on_the_same_api_server_are_never_deleted(demo, fake):
    """Issue #15.3: a Cohort labelled for k8s-east appeared as would_delete in k8s-west's sync."""
    sync(demo, fake)
    east = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {
            "name": "acme.east-only",
            "labels": {"app.kubernetes.io/managed-by": "allot", "allot.dev/cluster": "k8s-east"},
        },
        "spec": {},
    }
    fake.objects[("Cohort", "", "acme.east-only")] = fake._stored(east, "allot")
    for mode in ("dry_run", "apply"):
        run = sync(demo, fake, mode=mode)
        assert not SyncObject.objects.filter(run=run, name="acme.east-only").exists()
        assert "objects Allot compiled for k8s-east are on this API server too: left alone" in run.message
    assert ("Cohort", "", "acme.east-only") in fake.objects


def test_a_local_queue_allot_does_not_own_keeps_its_namespace_in_the_queues_selector(demo, fake):
    """Issue #15.7: after an import, a foreign LocalQueue made the next sync strip the ClusterQueue's
    namespaceSelector, and that namespace lost its queue."""
    fake.put_unmanaged(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "legacy", "namespace": "legacy-ml"},
            "spec": {"clusterQueue": "acme.research.rl"},
        }
    )
    run = sync(demo, fake)
    assert run.status == SyncStatus.APPLIED
    assert "ClusterQueue acme.research.rl keeps namespace(s) legacy-ml of LocalQueues Allot does not own" in run.message
    selector = fake.objects[("ClusterQueue", "", "acme.research.rl")]["spec"]["namespaceSelector"]
    assert "legacy-ml" in selector["matchExpressions"][0]["values"]
    assert sync(demo, fake).status == SyncStatus.IN_SYNC  # stable: kept every time, not flapping


def _older(crds, *, only_v1beta1=(), without=()):
    """The bundled CRDs as an older Kueue would serve them: some kinds v1beta1 only, or some spec fields
    missing from their v1beta2 schema (``(kind, field)``)."""
    import copy

    out = []
    for crd in copy.deepcopy(crds):
        kind = crd["spec"]["names"]["kind"]
        if kind in only_v1beta1:
            crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
        for v in crd["spec"]["versions"]:
            props = v["schema"]["openAPIV3Schema"]["properties"].get("spec", {}).get("properties", {})
            for missing_kind, field in without:
                if kind == missing_kind:
                    props.pop(field, None)
        out.append(crd)
    return out


def test_a_cluster_serving_no_version_allot_speaks_is_refused_before_anything_is_sent(demo, crd_schemas):
    """v1beta1 clusters (Kueue v0.13, v0.14) are synced in v1beta1: tests/quotas/test_kube_real.py does it on a
    real Kueue. A Kueue older still (v1alpha1 only) is refused with what to do, and nothing is written."""
    from tests.kube_fake import bundled_crds

    old = bundled_crds()
    for crd in old:
        if crd["spec"]["names"]["kind"] in ("ClusterQueue", "Cohort"):
            crd["spec"]["versions"] = [{**crd["spec"]["versions"][0], "name": "v1alpha1"}]
    with FakeKueueServer(crd_schemas, crds=old) as fake:
        run = sync(demo, fake)
    assert run.status == SyncStatus.FAILED
    assert "does not serve Cohort, ClusterQueue in one version Allot speaks (v1beta2 or v1beta1" in run.message
    assert "upgrade Kueue to v0.13 or newer" in run.message and "nothing was sent" in run.message
    assert fake.writes() == [] and fake.objects == {}


def test_an_older_v1beta2_server_gets_its_objects_without_the_fields_it_lacks_and_the_run_says_so(demo, crd_schemas):
    from quotas.policy.kueue.schema import CrdSchemas
    from tests.kube_fake import bundled_crds

    demo.kueue_sharing = "admission"
    demo.save()
    old = _older(bundled_crds(), without=(("ClusterQueue", "admissionScope"), ("LocalQueue", "fairSharing")))
    older_schemas = CrdSchemas(dc for dc in old if "workloads" not in dc["metadata"]["name"])
    with FakeKueueServer(older_schemas, crds=old) as fake:
        run = sync(demo, fake)
        assert run.status == SyncStatus.APPLIED, run.message
        assert "left out ClusterQueue spec.admissionScope on 15 object(s)" in run.message
        assert "left out LocalQueue spec.fairSharing" in run.message
        stored = [o for (kind, _, _), o in fake.objects.items() if kind == "ClusterQueue"]
        assert stored and not any("admissionScope" in o["spec"] for o in stored)
        again = sync(demo, fake)  # and it stays in sync
        assert again.status == SyncStatus.IN_SYNC, again.message


def test_a_queue_whose_quota_another_controller_sets_is_a_conflict_not_a_fight(demo, fake):
    sync(demo, fake)
    demo.drift_policy = DriftPolicy.CORRECT  # even where drift is corrected: Allot does not force over a controller
    demo.save()
    fake.kubectl_edit(
        "ClusterQueue",
        "acme.research.speech",
        lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2].update(nominalQuota="99"),
        manager="argocd-application-controller",
    )
    queue = fake.objects[("ClusterQueue", "", "acme.research.rl")]
    queue.setdefault("status", {})["effectiveQuotas"] = [
        {"name": "a100-80gb", "resources": [{"name": "nvidia.com/gpu", "total": "4"}]}
    ]
    before = len(fake.writes())
    run = sync(demo, fake, mode="drift_check")
    assert run.status == SyncStatus.PARTIAL and outcomes(run) == {"conflict": 2, "unchanged": 43}
    messages = {o.name: o.message for o in run.results.filter(outcome=SyncOutcome.CONFLICT)}
    assert messages["acme.research.speech"].startswith("argocd-application-controller sets this ClusterQueue's quota")
    assert "ignoreDifferences on spec.resourceGroups" in messages["acme.research.speech"]
    assert messages["acme.research.rl"].startswith("Kueue's DynamicQuotaOrchestration sets this ClusterQueue's quota")
    assert "feature gate off" in messages["acme.research.rl"]
    assert "also sets: left alone" in run.message
    assert len(fake.writes()) == before  # nothing forced
    stored = fake.objects[("ClusterQueue", "", "acme.research.speech")]
    assert stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == "99"
