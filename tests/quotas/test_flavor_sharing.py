"""A flavor's sharing contract through the API and the services (issue #45.1): MIG profiles with their
weights in GPU-equivalents, bad settings refused naming the field, the cluster's Kueue configuration."""

import pytest
from rest_framework.test import APIClient

from quotas.models import AuditEvent, ResourceFlavor

pytestmark = pytest.mark.django_db

MIG = {
    "cluster": "west",
    "name": "h100-mig",
    "accelerator_model": "NVIDIA H100 80GB HBM3",
    "device_memory_gb": 80,
    "physical_devices": 8,
    "sharing": "mig",
    "mig_profiles": ["1g.10gb", "3g.40gb"],
    "reason": "inference pool",
}


@pytest.fixture
def api(org):
    client = APIClient()
    client.force_authenticate(org.admin)
    return client


def test_a_mig_flavor_offers_its_profiles_with_their_weights(api, org):
    created = api.post("/api/v1/flavors/", MIG, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["sharing"] == "mig" and "own compute and memory" in body["isolation"]
    assert body["profile_offers"] == [
        {
            "profile": "1g.10gb",
            "resource": "nvidia.com/mig-1g.10gb",
            "weight": "1/7",
            "weight_micro": 142857,
            "per_gpu_equivalent": 7,
            "rule": "max(compute 1/7, memory 1/8)",
        },
        {
            "profile": "3g.40gb",
            "resource": "nvidia.com/mig-3g.40gb",
            "weight": "1/2",
            "weight_micro": 500000,
            "per_gpu_equivalent": 2,
            "rule": "max(compute 3/7, memory 1/2)",
        },
    ]
    event = AuditEvent.objects.get(action="flavor_set", object_repr="west/h100-mig")
    after = event.after or {}
    assert after["sharing"] == "mig" and after["mig_profiles"] == ["1g.10gb", "3g.40gb"]
    whole = api.get(f"/api/v1/flavors/{org.flavor.pk}/").json()
    assert whole["sharing"] == "whole" and whole["profile_offers"] == []
    config = api.get("/api/v1/clusters/west/kueue-config/?version=v1beta1").json()["configuration"]
    assert config["resources"]["transformations"][0] == {
        "input": "nvidia.com/mig-1g.10gb",
        "strategy": "Replace",
        "outputs": {"allot.dev/gpu-equivalent-millionths": "142857"},
    }


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"sharing": "fractional"}, "sharing", "is not a valid choice"),
        ({"mig_profiles": ["2g.25gb"]}, "profile_weights", "is not a profile of 'H100-80GB'"),
        ({"profile_weights": {"1g.10gb": "1.5"}}, "profile_weights.1g.10gb", "at most 1 GPU-equivalent"),
        ({"sharing": "time-slicing", "mig_profiles": []}, "shares", "replicas per GPU, 2 to 64"),
        ({"shares": 4}, "shares", "only MPS and time-slicing"),
    ],
)
def test_bad_sharing_settings_name_the_field_and_nothing_is_saved(api, org, change, field, says):
    before = AuditEvent.objects.count()
    answer = api.post("/api/v1/flavors/", {**MIG, **change}, format="json")
    assert answer.status_code == 400
    assert says in answer.json()[field][0], answer.json()
    assert not ResourceFlavor.objects.filter(name="h100-mig").exists()
    assert AuditEvent.objects.count() == before


def test_a_profile_keeps_one_weight_on_a_cluster(api, org):
    assert api.post("/api/v1/flavors/", MIG, format="json").status_code == 201
    other = {**MIG, "name": "h100-mig-b", "profile_weights": {"3g.40gb": "3/7"}}
    answer = api.post("/api/v1/flavors/", other, format="json")
    assert answer.status_code == 400
    assert "nvidia.com/mig-3g.40gb weighs 1/2 on h100-mig but 3/7 on h100-mig-b" in str(answer.json())
    same = {**MIG, "name": "h100-mig-b"}  # the same weights on a second pool: fine
    assert api.post("/api/v1/flavors/", same, format="json").status_code == 201


def test_time_sliced_shares(api, org):
    shared = {**MIG, "name": "t4-shared", "sharing": "time-slicing", "mig_profiles": [], "shares": 4}
    body = api.post("/api/v1/flavors/", shared, format="json").json()
    assert body["profile_offers"][0]["resource"] == "nvidia.com/gpu.shared"
    assert body["profile_offers"][0]["weight"] == "1/4" and "nothing is isolated" in body["isolation"]


def test_leads_see_equivalents_with_the_slices_they_hold(api, org, client):
    from quotas import services
    from quotas.policy import Resource

    flavor_id = api.post("/api/v1/flavors/", MIG, format="json").json()["id"]
    changes = [services.QuotaChange(org.acme.pk, flavor_id, Resource.GPU, 2, 0, 0)]
    services.quota_set_bulk(actor=org.admin, reason="inference", changes=changes)
    changes = [services.QuotaChange(org.research.pk, flavor_id, Resource.GPU, 1, 1, 0)]
    services.quota_set_bulk(actor=org.admin, reason="inference", changes=changes)
    client.force_login(org.admin)
    page = client.get(f"/units/{org.research.pk}/").content.decode()
    assert "GPU-equivalents" in page
    assert "7 × 1g.10gb or 2 × 3g.40gb" in page  # the guarantee of 1
    assert "14 × 1g.10gb or 4 × 3g.40gb" in page  # the ceiling of 2
    form = client.get(f"/units/{org.research.pk}/quotas/").content.decode()
    assert "MIG slices (hardware partitions): 1g.10gb = 1/7, 3g.40gb = 1/2 GPU-equivalent" in form
    assert "GPU-equivalents" in form.split("west/h100-mig", 1)[1]  # its row is titled in equivalents


def test_the_coverage_report_says_what_slices_rely_on(api, org):
    assert api.post("/api/v1/flavors/", MIG, format="json").status_code == 201
    lines = api.get("/api/v1/clusters/west/coverage/").json()
    mig = {(line["term"], line["how"]) for line in lines if line["subject"] == "flavor h100-mig"}
    assert mig == {
        ("slices by weight", "depends_on_kueue_configuration"),
        ("slices it offers", "enforced_by_allot_webhook"),
    }
    assert not [line for line in lines if line["subject"] == "flavor a100"]
