"""Kueue endpoints: desired objects, coverage, sync runs, preview; a cluster's sharing mode and the Kueue
configuration it serves, a unit's cost centre on its Kueue objects (issue #30, parts 1 and 2)."""

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from quotas.models import AuditEvent, Cluster, OrgUnit, Quota, SyncRun, SyncStatus
from tests.kube_fake import FakeKueueServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(demo):
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    return client


@pytest.fixture
def lead_api(demo):
    client = APIClient()
    client.force_authenticate(User.objects.get(username="lead-rl"))
    return client


def test_desired_objects_and_coverage(lead_api):
    objects = lead_api.get("/api/v1/clusters/k8s-west/kueue/").json()
    assert len(objects) == 45
    queues = lead_api.get("/api/v1/clusters/k8s-west/kueue/", {"kind": "ClusterQueue"}).json()
    assert {o["kind"] for o in queues} == {"ClusterQueue"} and len(queues) == 15
    coverage = lead_api.get("/api/v1/clusters/k8s-west/coverage/").json()
    by_term = {(c["subject"], c["term"]): c["how"] for c in coverage}
    assert by_term[("quota", "guarantee")] == "enforced_by_kueue"
    assert by_term[("contract standard", "min_run_window")] == "monitored_not_enforced"
    assert by_term[("contract standard", "grace_period")] == "enforced_by_allot_webhook"
    assert by_term[("tier P2", "max runtime")] == "enforced_by_allot_webhook"
    slurm = lead_api.get("/api/v1/clusters/slurm-lab/kueue/")
    assert slurm.status_code == 400 and "Kubernetes" in slurm.json()["cluster"][0]


def test_sync_through_the_api_records_a_run(
    admin_api, demo, crd_schemas, django_capture_on_commit_callbacks, monkeypatch
):
    from config.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)  # in-process; tests/quotas/test_tasks.py runs a worker
    with FakeKueueServer(crd_schemas) as fake:
        demo.connection_ref = f"url:{fake.url}"
        demo.save()
        with django_capture_on_commit_callbacks(execute=True):
            response = admin_api.post("/api/v1/clusters/k8s-west/sync/", {"reason": "first sync"}, format="json")
        assert response.status_code == 202
    run = SyncRun.objects.get()
    assert run.status == SyncStatus.APPLIED and run.reason == "first sync"
    assert run.actor_name == "admin"  # who asked, not "system"
    listed = admin_api.get("/api/v1/sync-runs/", {"cluster": "k8s-west"}).json()
    assert listed["count"] == 1 and listed["results"][0]["counts"] == {"created": 45}
    detail = admin_api.get(f"/api/v1/sync-runs/{run.pk}/").json()
    assert len(detail["results"]) == 45 and detail["results"][0]["kind"] == "ResourceFlavor"


def test_sync_needs_an_admin_and_a_reason(admin_api, lead_api):
    assert lead_api.post("/api/v1/clusters/k8s-west/sync/", {"reason": "x"}, format="json").status_code == 403
    missing = admin_api.post("/api/v1/clusters/k8s-west/sync/", {}, format="json")
    assert missing.status_code == 400 and "reason" in missing.json()


def test_preview_shows_violations_and_the_object_diff(lead_api):
    rl = Quota.objects.get(unit__path="acme/research/rl", flavor__name="a100-80gb", resource="nvidia.com/gpu")
    body = {"changes": [{"unit": rl.unit_id, "flavor": rl.flavor_id, "resource": "gpu", "guarantee": 20}]}
    preview = lead_api.post("/api/v1/preview/", body, format="json").json()
    assert preview["violations"] == []
    plans = {(p["kind"], p["name"]): p["changes"] for p in preview["clusters"]["k8s-west"]}
    assert set(plans) == {("ClusterQueue", "acme.research.rl"), ("Cohort", "acme.research")}
    assert plans[("ClusterQueue", "acme.research.rl")] == [
        {"path": "spec.resourceGroups[0].flavors[2].resources[2].nominalQuota", "desired": "20", "actual": "18"}
    ]
    too_much = {"changes": [{**body["changes"][0], "guarantee": 60}]}
    preview = lead_api.post("/api/v1/preview/", too_much, format="json").json()
    assert preview["violations"][0]["code"] == "children_exceed_guarantee"
    assert Quota.objects.get(pk=rl.pk).guarantee == 18  # nothing saved


def test_preview_of_a_slurm_only_flavor_changes_no_kueue_object_but_its_slurm_qos(lead_api):
    rl = Quota.objects.get(unit__path="acme/research/rl", flavor__name="h100", resource="nvidia.com/gpu")
    body = {"changes": [{"unit": rl.unit_id, "flavor": rl.flavor_id, "resource": "gpu", "guarantee": 2}]}
    preview = lead_api.post("/api/v1/preview/", body, format="json").json()
    assert preview["violations"] == [] and preview["clusters"]["k8s-west"] == []
    slurm = {(p["kind"], p["name"], p["action"]): p["changes"] for p in preview["clusters"]["slurm-lab"]}

    def h100(n):  # the typed limit and the untyped backstop at the same total (issue #41)
        return {"gres/gpu:h100": n, "gres/gpu": n}

    research = slurm_residual("acme/research")
    assert slurm == {
        ("Slurm qos", "guar-rl", "update"): [{"path": "grptres", "desired": h100(2), "actual": h100(rl.guarantee)}],
        ("Slurm qos", "guar-research", "update"): [
            {"path": "grptres", "desired": h100(research - (2 - rl.guarantee)), "actual": h100(research)}
        ],
    }


def slurm_residual(path):
    """What a unit guarantees on slurm-lab's h100 beyond its children."""
    own = Quota.objects.get(unit__path=path, flavor__name="h100", resource="nvidia.com/gpu").guarantee
    children = Quota.objects.filter(
        unit__parent__path=path, unit__archived_at=None, flavor__name="h100", resource="nvidia.com/gpu"
    )
    return own - sum(q.guarantee for q in children)


def test_the_desired_slurm_state_with_its_dump_and_qos_script(lead_api, tmp_path):
    from django.core.management import call_command

    body = lead_api.get("/api/v1/clusters/slurm-lab/slurm/").json()
    accounts = {a["name"]: a for a in body["accounts"]}
    assert body["cluster"] == "lab" and accounts["nlp"]["parent"] == "research"
    assert "guar-nlp" in accounts["nlp"]["qos"] and body["problems"] == []
    assert body["billing"] == {"slurm-lab/h100": "CPU=1.0,Mem=0.25G,GRES/gpu:h100=20"}
    assert "Account - 'nlp':Description='team acme/research/nlp'" in body["dump"]
    assert body["qos_script"].startswith("#!/bin/sh") and "sacctmgr -i add qos burst-" in body["qos_script"]
    assert lead_api.get("/api/v1/clusters/k8s-west/slurm/").status_code == 400
    call_command("allot_slurm_policy", "--cluster", "slurm-lab", "--out", str(tmp_path / "policy"),
                 "--export-dir", str(tmp_path))  # fmt: skip
    assert (tmp_path / "lab.cfg").read_text() == body["dump"]
    assert (tmp_path / "lab-qos.sh").read_text() == body["qos_script"]


def test_slurm_coverage_and_the_subtree_ceilings_setting(admin_api, lead_api):
    """Issue #16.7: a Slurm cluster's coverage report says how subtree ceilings are held; strict by
    default (no subtree's QOS add up to more than its ceiling); permissive is an audited setting after
    which the report lists each subtree that may exceed its ceiling."""
    from quotas.models import AuditEvent

    assert admin_api.get("/api/v1/clusters/slurm-lab/").json()["subtree_ceilings"] == "strict"
    coverage = lead_api.get("/api/v1/clusters/slurm-lab/coverage/").json()
    line = next(c for c in coverage if c["term"] == "subtree ceiling")
    assert (line["value"], line["how"]) == ("strict", "enforced_by_slurm")
    assert not [c for c in coverage if c["subject"].startswith("unit ")]
    bad = admin_api.patch("/api/v1/clusters/slurm-lab/", {"subtree_ceilings": "loose", "reason": "t"}, format="json")
    assert bad.status_code == 400 and "subtree_ceilings" in bad.json()
    ok = admin_api.patch(
        "/api/v1/clusters/slurm-lab/", {"subtree_ceilings": "permissive", "reason": "more borrowing"}, format="json"
    )
    assert ok.status_code == 200, ok.content
    event = AuditEvent.objects.filter(action="cluster_set").latest("id")
    assert event.reason == "more borrowing" and (event.after or {}).get("subtree_ceilings") == "permissive"
    loose = lead_api.get("/api/v1/clusters/slurm-lab/coverage/").json()
    assert next(c for c in loose if c["term"] == "subtree ceiling")["how"] == "not_enforced"
    exceeding = [c for c in loose if c["subject"].startswith("unit ")]
    assert exceeding and all("ceiling" in c["value"] for c in exceeding)


def test_a_cluster_switched_to_admission_fair_sharing_compiles_and_serves_what_kueue_needs(admin_api, capsys):
    classic = admin_api.get("/api/v1/clusters/k8s-west/kueue-config/").json()
    assert "fairSharing" not in classic["configuration"]
    assert yaml.safe_load(classic["yaml"]) == classic["configuration"]
    coverage = {c["term"]: c["how"] for c in admin_api.get("/api/v1/clusters/k8s-west/coverage/").json()}
    assert coverage["fair-share weight"] == "not_enforced"

    changed = admin_api.patch(
        "/api/v1/clusters/k8s-west/",
        {"kueue_sharing": "admission", "fairshare_half_life": 3 * 86400, "reason": "tenants take turns"},
        format="json",
    )
    assert changed.status_code == 200 and changed.json()["kueue_sharing"] == "admission"
    assert AuditEvent.objects.filter(action="cluster_set", after__kueue_sharing="admission").exists()
    config = admin_api.get("/api/v1/clusters/k8s-west/kueue-config/").json()["configuration"]
    assert config["admissionFairSharing"]["usageHalfLifeTime"] == "72h0m0s"
    assert config["fairSharing"]["preemptionStrategies"][0] == "LessThanOrEqualToFinalShare"
    queues = admin_api.get("/api/v1/clusters/k8s-west/kueue/", {"kind": "ClusterQueue"}).json()
    assert {q["spec"]["admissionScope"]["admissionMode"] for q in queues} == {"UsageBasedAdmissionFairSharing"}
    coverage = {c["term"]: c["how"] for c in admin_api.get("/api/v1/clusters/k8s-west/coverage/").json()}
    assert coverage["fair-share weight"] == coverage["fair-share half-life"] == "enforced_by_kueue"

    call_command("allot_kueue_config", "--cluster", "k8s-west")
    printed = capsys.readouterr().out
    assert "sharing: admission" in printed and "usageHalfLifeTime: 72h0m0s" in printed
    slurm = admin_api.get("/api/v1/clusters/slurm-lab/kueue-config/")
    assert slurm.status_code == 400 and "Kubernetes" in slurm.json()["cluster"][0]


def test_a_zero_half_life_under_admission_fair_sharing_is_refused_and_nothing_changes(admin_api):
    from quotas import services
    from quotas.errors import InputError

    admin = User.objects.get(username="admin")
    with pytest.raises(InputError) as refused:
        services.cluster_set(actor=admin, reason="t", name="k8s-west", kueue_sharing="admission", fairshare_half_life=0)
    assert "604800" in refused.value.errors["fairshare_half_life"][0]
    assert Cluster.objects.get(name="k8s-west").kueue_sharing == "classic"
    bad = admin_api.patch("/api/v1/clusters/k8s-west/", {"kueue_sharing": "round-robin", "reason": "t"}, format="json")
    assert bad.status_code == 400 and "kueue_sharing" in bad.json()


def test_a_units_cost_centre_is_set_audited_inherited_and_must_be_a_label_value(admin_api):
    nlp = OrgUnit.objects.get(path="acme/research/nlp")
    ok = admin_api.patch(f"/api/v1/units/{nlp.pk}/", {"cost_centre": "CC-7", "reason": "finance"}, format="json")
    assert ok.status_code == 200 and ok.json()["cost_centre"] == "CC-7"
    assert AuditEvent.objects.filter(action="org_unit_update", after__cost_centre="CC-7").exists()
    queues = {q["metadata"]["name"]: q for q in admin_api.get("/api/v1/clusters/k8s-west/kueue/").json()}
    assert queues["acme.research.nlp.llm-pretrain"]["metadata"]["labels"]["allot.dev/cost-centre"] == "CC-7"
    assert queues["acme.research.vision"]["metadata"]["labels"]["allot.dev/cost-centre"] == "CC-1100"
    bad = admin_api.patch(f"/api/v1/units/{nlp.pk}/", {"cost_centre": "cc 7/a", "reason": "finance"}, format="json")
    assert bad.status_code == 400 and "not a Kubernetes label value" in str(bad.json()["cost_centre"])
    assert OrgUnit.objects.get(pk=nlp.pk).cost_centre == "CC-7"


def test_the_api_refuses_to_queue_a_run_of_a_switched_off_cluster_like_the_portal(admin_api, demo):
    """One rule for both doors (quotas.tasks.cluster_sync_start): a switched-off cluster is refused with the fix,
    not queued for a run that the worker would refuse."""
    demo.enabled = False
    demo.save()
    off = admin_api.post("/api/v1/clusters/k8s-west/sync/", {"reason": "x"}, format="json")
    assert off.status_code == 400 and "switched off" in str(off.json()["cluster"])
