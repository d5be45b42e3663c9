"""Object-level access through the API: a lead of team A cannot change team B, on any endpoint."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from quotas import services
from quotas.models import ChangeRequest, Cluster, OrgUnit, Quota, ReclamationContract, ResourceFlavor
from quotas.policy import Resource

pytestmark = pytest.mark.django_db
GPU = Resource.GPU


def client_for(username):
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def gpu(path):
    return Quota.objects.get(unit__path=path, flavor__name="a100-80gb", resource="nvidia.com/gpu")


def change(path, guarantee):
    q = gpu(path)
    return {"unit": q.unit_id, "flavor": q.flavor_id, "resource": "gpu", "guarantee": guarantee}


def test_a_lead_sets_their_projects_directly(demo):
    lead = client_for("lead-nlp")
    q = gpu("acme/research/nlp/llm-pretrain")
    ok = lead.patch(
        f"/api/v1/quotas/{q.pk}/",
        {"guarantee": q.guarantee - 2, "reason": "give eval more"},
        format="json",
        HTTP_IF_MATCH=q.etag,
    )
    assert ok.status_code == 200
    own = gpu("acme/research/nlp")
    refused = lead.patch(
        f"/api/v1/quotas/{own.pk}/",
        {"guarantee": own.guarantee + 1, "reason": "r"},
        format="json",
        HTTP_IF_MATCH=own.etag,
    )
    assert refused.status_code == 403 and "change request" in refused.json()["detail"]


def other_teams_writes(demo):
    """Every write endpoint, aimed at team vision (or something only admins change)."""
    vision = OrgUnit.objects.get(path="acme/research/vision")
    q = gpu("acme/research/vision/detection")
    flavor = ResourceFlavor.objects.get(name="a100-80gb")
    request = ChangeRequest.objects.create(
        unit=vision,
        requested_by=User.objects.get(username="lead-vision"),
        reason="r",
        changes=[change("acme/research/vision", 55)],
        created_at="2026-11-29T00:00:00Z",
    )
    request.units.add(vision)
    reason = {"reason": "r"}
    return [
        ("patch", f"/api/v1/quotas/{q.pk}/", {"guarantee": 1, **reason}, {"HTTP_IF_MATCH": q.etag}),
        ("post", "/api/v1/quotas/", {**change("acme/research/vision/detection", 1), "resource": "cpu", **reason}, {}),
        (
            "post",
            "/api/v1/quotas/bulk/",
            {"changes": [{**change("acme/research/vision/detection", 1), "version": q.version}], **reason},
            {},
        ),
        ("post", "/api/v1/change-requests/", {"changes": [change("acme/research/vision", 56)], **reason}, {}),
        ("post", f"/api/v1/change-requests/{request.pk}/approve/", {}, {}),
        ("post", f"/api/v1/change-requests/{request.pk}/reject/", {"comment": "no"}, {}),
        ("post", "/api/v1/units/", {"parent": vision.pk, "kind": "project", "slug": "x", **reason}, {}),
        ("patch", f"/api/v1/units/{vision.pk}/", {"weight": "9", **reason}, {}),
        ("post", f"/api/v1/units/{vision.pk}/move/", {"parent": vision.parent_id, **reason}, {}),
        ("post", f"/api/v1/units/{vision.pk}/archive/", reason, {}),
        ("post", "/api/v1/clusters/", {"name": "x", "kind": "slurm", **reason}, {}),
        ("patch", "/api/v1/clusters/k8s-west/", {"enabled": False, **reason}, {}),
        ("post", "/api/v1/clusters/k8s-west/sync/", reason, {}),
        ("patch", f"/api/v1/flavors/{flavor.pk}/", {"headroom_devices": 0, **reason}, {}),
        ("post", "/api/v1/reservations/", {"flavor": flavor.pk, "name": "x", "devices": 1, **reason}, {}),
        (
            "patch",
            f"/api/v1/contracts/{ReclamationContract.objects.get(name='standard').name}/",
            {"grace_period": 1, **reason},
            {},
        ),
        ("post", "/api/v1/tiers/", {"name": "P9", "display_name": "x", "priority": 1, **reason}, {}),
    ]


@pytest.mark.parametrize("who", ["lead-nlp", "viewer"])
def test_no_write_endpoint_lets_a_lead_of_another_team_or_a_viewer_change_anything(demo, who):
    client = client_for(who)
    before = {(q.pk, q.guarantee, q.version) for q in Quota.objects.all()}
    for method, url, body, headers in other_teams_writes(demo):
        response = getattr(client, method)(url, body, format="json", **headers)
        # deciding a request they may not read is "not found", as reading it is (no unit named)
        unreadable = url.endswith(("/approve/", "/reject/"))
        assert response.status_code == (404 if unreadable else 403), (method, url, response.status_code)
        assert not unreadable or "vision" not in response.content.decode()
    assert {(q.pk, q.guarantee, q.version) for q in Quota.objects.all()} == before
    assert ChangeRequest.objects.filter(status="pending").count() == 1


def ask_for_nlp(client, guarantee, reason):
    changes = [change("acme/research/nlp", guarantee)]
    return client.post("/api/v1/change-requests/", {"changes": changes, "reason": reason}, format="json")


def test_the_head_approves_through_the_api(demo):
    lead, head = client_for("lead-nlp"), client_for("head-research")
    before = gpu("acme/research/nlp").guarantee
    created = ask_for_nlp(lead, before + 3, "december run")
    assert created.status_code == 201 and created.json()["status"] == "pending"
    approved = head.post(f"/api/v1/change-requests/{created.json()['id']}/approve/", {"comment": "fine"}, format="json")
    assert approved.status_code == 200 and approved.json()["status"] == "applied"
    assert gpu("acme/research/nlp").guarantee == before + 3
    again = head.post(f"/api/v1/change-requests/{created.json()['id']}/approve/", {}, format="json")
    assert again.status_code == 400 and "already" in again.json()["status"][0]


def test_a_request_read_but_not_decided_is_403_and_a_stale_approval_is_409_with_the_values_it_had(demo):
    lead, head = client_for("lead-nlp"), client_for("head-research")
    before = gpu("acme/research/nlp").guarantee
    created = ask_for_nlp(lead, before + 3, "december run").json()
    mine = lead.post(f"/api/v1/change-requests/{created['id']}/approve/", {}, format="json")
    assert mine.status_code == 403  # the asker reads it, but decides nothing
    q = gpu("acme/research/nlp")  # meanwhile the head changes nlp directly: the request is stale
    services.quota_set(
        actor=User.objects.get(username="head-research"),
        reason="meanwhile",
        unit_id=q.unit_id,
        flavor_id=q.flavor_id,
        resource=GPU,
        guarantee=before + 1,
    )
    stale = head.post(f"/api/v1/change-requests/{created['id']}/approve/", {"comment": "ok"}, format="json")
    assert stale.status_code == 409 and stale.json()["status"] == "stale"
    assert gpu("acme/research/nlp").guarantee == before + 1  # nothing applied

    again = ask_for_nlp(lead, before + 5, "december run, again").json()
    assert head.post(f"/api/v1/change-requests/{again['id']}/approve/", {}, format="json").status_code == 200
    portal = APIClient()
    portal.force_login(User.objects.get(username="head-research"))
    page = portal.get(f"/requests/{again['id']}/")
    # decided: the values it had when decided, not "now → now"
    assert f"guarantee <strong>{before + 1} → {before + 5}</strong>" in page.content.decode()
    assert "(when decided → asked)" in page.content.decode()


def test_cluster_lists_stay_readable(demo):
    assert client_for("viewer").get("/api/v1/units/").status_code == 200
    assert Cluster.objects.count() == 2
