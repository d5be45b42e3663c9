"""REST API v1: writes through the services, structured 400s, ETag/If-Match, auth, filters."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from quotas import services
from quotas.models import AuditEvent, Quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(org):
    client = APIClient()
    client.force_authenticate(org.admin)
    return client


def gpu_quota(org, unit):
    return Quota.objects.get(unit=unit, flavor=org.flavor, resource="nvidia.com/gpu")


def test_reads_need_a_login_and_writes_need_an_admin(org):
    client = APIClient()
    assert client.get("/api/v1/units/").status_code == 403
    viewer = User.objects.create_user("viewer")
    client.force_authenticate(viewer)
    assert client.get("/api/v1/units/").status_code == 200
    response = client.post(
        "/api/v1/units/", {"parent": org.acme.pk, "kind": "department", "slug": "x", "reason": "r"}, format="json"
    )
    assert response.status_code == 403
    assert "platform admin" in response.json()["detail"]


def test_token_authentication(org):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=org.admin)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert client.get("/api/v1/quotas/").status_code == 200


def test_quota_patch_needs_if_match_and_refuses_stale_versions(api, org):
    quota = gpu_quota(org, org.vision)
    url = f"/api/v1/quotas/{quota.pk}/"
    got = api.get(url)
    etag = got["ETag"]
    assert etag == f'"q{quota.pk}-v{quota.version}"'
    missing = api.patch(url, {"guarantee": 21, "reason": "r"}, format="json")
    assert missing.status_code == 428 and etag in missing.json()["detail"]
    ok = api.patch(url, {"guarantee": "21", "reason": "more for vision"}, format="json", HTTP_IF_MATCH=etag)
    assert ok.status_code == 200, ok.json()
    assert ok.json()["guarantee"] == 21 and ok["ETag"] != etag
    stale = api.patch(url, {"guarantee": 22, "reason": "r"}, format="json", HTTP_IF_MATCH=etag)
    assert stale.status_code == 412
    assert stale.json()["current"]["guarantee"] == 21
    assert gpu_quota(org, org.vision).guarantee == 21
    assert AuditEvent.objects.filter(reason="more for vision").count() == 1


def test_quota_violation_is_a_400_with_the_structured_list(api, org):
    quota = gpu_quota(org, org.vision)
    response = api.patch(
        f"/api/v1/quotas/{quota.pk}/", {"guarantee": 35, "reason": "r"}, format="json", HTTP_IF_MATCH=quota.etag
    )
    assert response.status_code == 400
    [v] = response.json()["violations"]
    assert v["code"] == "children_exceed_guarantee"
    assert (v["unit"], v["flavor"], v["resource"], v["limit"], v["actual"]) == (
        "acme/research",
        "west/a100",
        "nvidia.com/gpu",
        60,
        65,
    )
    assert v["hint"]
    assert gpu_quota(org, org.vision).guarantee == 20


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (-1, "negative"),
        ("lots", "not a quantity"),
        ("0.5", "whole number of devices"),
        (None, "not a quantity"),
    ],
)
def test_bad_quantities_name_the_field_and_the_fix(api, org, value, fragment):
    quota = gpu_quota(org, org.vision)
    response = api.patch(
        f"/api/v1/quotas/{quota.pk}/", {"guarantee": value, "reason": "r"}, format="json", HTTP_IF_MATCH=quota.etag
    )
    assert response.status_code == 400
    [message] = response.json()["guarantee"]
    assert fragment in message and ":" in message  # the problem, then what to write


def test_create_quota_with_kubernetes_syntax_and_unknown_resource(api, org):
    body = {
        "unit": org.acme.pk,
        "flavor": org.flavor.pk,
        "resource": "memory",
        "guarantee": "2Ti",
        "reason": "memory for the org",
    }
    created = api.post("/api/v1/quotas/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["guarantee"] == 2 * 2**40 and created.json()["display"]["guarantee"] == "2Ti"
    again = api.post("/api/v1/quotas/", body, format="json")
    assert again.status_code == 412  # exists already: PATCH it with If-Match
    unknown = api.post("/api/v1/quotas/", {**body, "resource": "tpu"}, format="json")
    assert unknown.status_code == 400 and "nvidia.com/gpu" in unknown.json()["resource"][0]
    flavor = api.post("/api/v1/quotas/", {**body, "flavor": 999}, format="json")
    assert flavor.status_code == 400 and "flavor" in flavor.json()


def test_bulk_is_all_or_nothing(api, org):
    changes = [
        {"unit": u.pk, "flavor": org.flavor.pk, "resource": "gpu", "guarantee": g, "version": gpu_quota(org, u).version}
        for u, g in ((org.nlp, 25), (org.ops, 50))
    ]
    refused = api.post("/api/v1/quotas/bulk/", {"reason": "r", "changes": changes}, format="json")
    assert refused.status_code == 400
    [v] = refused.json()["violations"]  # research 60 + ops 50 > acme's 100
    assert (v["code"], v["unit"], v["limit"], v["actual"]) == ("children_exceed_guarantee", "acme", 100, 110)
    assert gpu_quota(org, org.nlp).guarantee == 30
    changes[1]["guarantee"] = 30
    done = api.post("/api/v1/quotas/bulk/", {"reason": "r", "changes": changes}, format="json")
    assert done.status_code == 200 and {q["guarantee"] for q in done.json()} == {25, 30}


def test_every_write_names_the_version_it_was_based_on(api, org):
    """Issue #13.2: `If-Match: *` and a bulk item without `version` overwrote whatever was current."""
    quota = gpu_quota(org, org.vision)
    url = f"/api/v1/quotas/{quota.pk}/"
    star = api.patch(url, {"guarantee": 11, "reason": "r"}, format="json", HTTP_IF_MATCH="*")
    assert star.status_code == 428 and quota.etag in star.json()["detail"] and "not accepted" in star.json()["detail"]
    item = {"unit": org.vision.pk, "flavor": org.flavor.pk, "resource": "gpu", "guarantee": 11}
    bulk = api.post("/api/v1/quotas/bulk/", {"reason": "r", "changes": [item]}, format="json")
    assert bulk.status_code == 400 and "Send the version you edited" in bulk.json()["changes"]["0"]["version"][0]
    assert gpu_quota(org, org.vision).guarantee == 20 and gpu_quota(org, org.vision).version == quota.version
    stale = api.post(
        "/api/v1/quotas/bulk/", {"reason": "r", "changes": [{**item, "version": quota.version - 1}]}, format="json"
    )
    assert stale.status_code == 412
    done = api.post(
        "/api/v1/quotas/bulk/", {"reason": "r", "changes": [{**item, "version": quota.version}]}, format="json"
    )
    assert done.status_code == 200 and gpu_quota(org, org.vision).guarantee == 11


def test_partial_updates_keep_what_they_do_not_name_and_text_is_text(api, org):
    """Issue #13.3/#13.4: PATCH of a reservation without `devices` was a TypeError (500); `"reason": 5`
    was taken as "5"; control characters reached the database."""
    from quotas.models import CapacityReservation

    reservation = CapacityReservation.objects.get(name="serving")
    url = f"/api/v1/reservations/{reservation.pk}/"
    done = api.patch(url, {"description": "inference fleet", "reason": "describe it"}, format="json")
    assert done.status_code == 200, done.json()
    reservation.refresh_from_db()
    assert (reservation.devices, reservation.description) == (10, "inference fleet")
    number = api.patch(url, {"description": "x", "reason": 5}, format="json")
    assert number.status_code == 400 and "JSON string" in number.json()["reason"][0]
    control = api.patch(url, {"description": "bell\x07", "reason": "r"}, format="json")
    assert control.status_code == 400 and "U+0007" in control.json()["description"][0]
    long = api.patch(url, {"description": "y", "reason": "z" * 4001}, format="json")
    assert long.status_code == 400 and "reason" in long.json()
    reservation.refresh_from_db()
    assert reservation.description == "inference fleet"
    new = api.post("/api/v1/reservations/", {"flavor": org.flavor.pk, "name": "more", "reason": "r"}, format="json")
    assert new.status_code == 400 and "devices" in new.json()


def test_reason_is_required_on_writes(api, org):
    response = api.post("/api/v1/units/", {"parent": org.acme.pk, "kind": "department", "slug": "new"}, format="json")
    assert response.status_code == 400 and "reason" in response.json()


def test_unit_move_into_its_own_subtree_is_refused(api, org):
    response = api.post(f"/api/v1/units/{org.research.pk}/move/", {"parent": org.llm.pk, "reason": "r"}, format="json")
    assert response.status_code == 400
    assert response.json()["violations"][0]["code"] == "cycle"


def test_unit_create_update_archive(api, org):
    created = api.post(
        "/api/v1/units/",
        {"parent": org.ops.pk, "kind": "team", "slug": "sre", "weight": "2", "reason": "new team"},
        format="json",
    )
    assert created.status_code == 201 and created.json()["path"] == "acme/ops/sre"
    unit_id = created.json()["id"]
    bad = api.post(
        "/api/v1/units/", {"parent": org.ops.pk, "kind": "team", "slug": "Not OK", "reason": "r"}, format="json"
    )
    assert bad.status_code == 400 and "slug" in bad.json()
    patched = api.patch(
        f"/api/v1/units/{unit_id}/", {"weight": "3", "contract": "standard", "reason": "r"}, format="json"
    )
    assert patched.status_code == 200 and patched.json()["weight"] == "3.0000"
    archived = api.post(f"/api/v1/units/{unit_id}/archive/", {"reason": "done"}, format="json")
    assert archived.json()["archived"] is True


def test_contract_durations_and_infeasible_contract(api, org):
    created = api.post(
        "/api/v1/contracts/",
        {"name": "fast", "reclaim_within": "10m", "grace_period": "PT1M", "min_run_window": 60, "reason": "r"},
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["reclaim_within"] == 600 and created.json()["display"]["grace_period"] == "1m"
    infeasible = api.patch("/api/v1/contracts/fast/", {"reclaim_within": "1m", "reason": "r"}, format="json")
    assert infeasible.status_code == 400
    assert infeasible.json()["violations"][0]["code"] == "contract_infeasible"
    bad = api.patch("/api/v1/contracts/fast/", {"grace_period": "soon", "reason": "r"}, format="json")
    assert bad.status_code == 400 and "15m" in bad.json()["grace_period"][0]


def test_reservation_above_capacity_is_refused(api, org):
    response = api.post(
        "/api/v1/reservations/", {"flavor": org.flavor.pk, "name": "vip", "devices": 5, "reason": "r"}, format="json"
    )
    assert response.status_code == 400 and response.json()["violations"][0]["limit"] == 95


def test_filters_and_pagination(api, org):
    within = api.get("/api/v1/quotas/", {"within": "acme/research/nlp"}).json()
    assert within["count"] == 2 and {q["unit_path"] for q in within["results"]} == {
        "acme/research/nlp",
        "acme/research/nlp/llm",
    }
    page = api.get("/api/v1/units/", {"page_size": 2}).json()
    assert page["count"] == 6 and len(page["results"]) == 2 and page["next"]
    teams = api.get("/api/v1/units/", {"kind": "team"}).json()
    assert {u["slug"] for u in teams["results"]} == {"nlp", "vision"}
    audit = api.get("/api/v1/audit/", {"within": "acme/research", "action": "quota_set"}).json()
    assert audit["count"] == 4


def test_audit_is_read_only(api, org):
    event = AuditEvent.objects.latest("id")
    assert api.post("/api/v1/audit/", {}, format="json").status_code == 405
    assert api.delete(f"/api/v1/audit/{event.pk}/").status_code == 405


def test_policy_report(api, org):
    report = api.get("/api/v1/policy/").json()
    assert report["violations"] == [] and report["units"] == 6
    [line] = report["capacity"]
    assert (line["reclaimable"], line["promised"], line["left_to_promise"]) == (100, 100, 0)


def test_schema_and_docs(api):
    assert api.get("/api/schema/").status_code == 200
    assert api.get("/api/docs/").status_code == 200


def test_catalogue_create_requires_its_fields_and_patch_is_partial(api, org):
    missing = api.post("/api/v1/clusters/", {"name": "east", "reason": "r"}, format="json")
    assert missing.status_code == 400 and "kind" in missing.json()
    created = api.post("/api/v1/clusters/", {"name": "east", "kind": "slurm", "reason": "new site"}, format="json")
    assert created.status_code == 201
    patched = api.patch("/api/v1/clusters/east/", {"display_name": "East", "reason": "label"}, format="json")
    assert patched.status_code == 200 and patched.json()["kind"] == "slurm"
    no_reason = api.patch("/api/v1/clusters/east/", {"display_name": "E"}, format="json")
    assert no_reason.status_code == 400 and "reason" in no_reason.json()
    flavor = api.patch(
        f"/api/v1/flavors/{org.flavor.pk}/", {"headroom_devices": 5, "reason": "less headroom"}, format="json"
    )
    assert flavor.status_code == 200 and flavor.json()["headroom_devices"] == 5
    assert AuditEvent.objects.filter(action="flavor_set", reason="less headroom").count() == 1


def test_a_connection_ref_allot_cannot_use_is_refused_naming_the_forms(api, org):
    """Issue #15.8: 'bogus' was accepted with 200."""
    for kind, ref, form in (
        ("kubernetes", "bogus", "'in-cluster'"),
        ("kubernetes", "kubeconfig:relative.yaml", "kubeconfig:/path"),
        ("kubernetes", "url:ftp://x", "url:https://host:port"),
        ("slurm", "kubeconfig:/etc/k.yaml", "slurm:<the cluster's name in slurmdbd>"),
    ):
        body = {"name": "east", "kind": kind, "connection_ref": ref, "reason": "r"}
        answer = api.post("/api/v1/clusters/", body, format="json")
        assert answer.status_code == 400 and form in str(answer.json()["connection_ref"]), answer.json()
    for i, (kind, ref) in enumerate(
        (("kubernetes", "in-cluster"), ("kubernetes", "url:http://x:8001"), ("slurm", "slurm:lab"))
    ):
        body = {"name": f"c{i}", "kind": kind, "connection_ref": ref, "reason": "r"}
        assert api.post("/api/v1/clusters/", body, format="json").status_code == 201


def test_flavor_labels_kueue_would_refuse_are_refused_at_input_and_nothing_is_saved(api, org):
    """Issue #15.6: such a flavor passed Allot and the API server, then blocked the cluster's sync."""
    url = f"/api/v1/flavors/{org.flavor.pk}/"
    for labels, words in (
        ({"bad key!": "true"}, "name 'bad key!' must be 1 to 63 characters"),
        ({"pool": "v" * 64}, "must be at most 63 characters"),
        ({f"l{i}": "x" for i in range(9)}, "at most 8 node labels"),
    ):
        answer = api.patch(url, {"node_labels": labels, "reason": "labels"}, format="json")
        assert answer.status_code == 400 and words in str(answer.json()["node_labels"]), answer.json()
    org.flavor.refresh_from_db()
    assert org.flavor.node_labels == {} and not AuditEvent.objects.filter(reason="labels").exists()
    good = api.patch(
        url, {"node_labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "reason": "ok"}, format="json"
    )
    assert good.status_code == 200


@pytest.mark.parametrize("url", ["/api/v1/units/", "/api/v1/quotas/", "/api/v1/flavors/", "/api/v1/audit/"])
def test_list_endpoints_do_not_query_per_row(url, django_assert_max_num_queries):
    from django.core.management import call_command

    call_command("allot_demo")  # 19 units, 5 flavors, 247 quotas, hundreds of audit rows
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    with django_assert_max_num_queries(8):
        response = client.get(url, {"page_size": 200})
    assert response.status_code == 200 and len(response.json()["results"]) >= 5


def test_leads_members_and_namespaces_through_the_api_each_audited(api, org):
    """Issue #13.5/#13.9: `leads`, `namespaces` and `members` sent to a unit endpoint were ignored
    (200, nothing changed). Leads are a unit field now; members and namespaces have their endpoints,
    and sending them to the unit says where they go."""
    User.objects.create_user("lee", "lee@example.org")
    url = f"/api/v1/units/{org.nlp.pk}/"
    ignored = api.patch(url, {"members": ["alice"], "namespaces": ["nlp"], "reason": "r"}, format="json")
    assert ignored.status_code == 400
    assert "/api/v1/units/{id}/members/" in ignored.json()["members"][0]
    assert "/api/v1/units/{id}/namespaces/" in ignored.json()["namespaces"][0]
    typo = api.patch(url, {"wieght": 2, "reason": "r"}, format="json")
    assert typo.status_code == 400 and "weight" in typo.json()["wieght"][0]

    led = api.patch(url, {"leads": ["lee"], "reason": "lee leads nlp"}, format="json")
    assert led.status_code == 200 and led.json()["leads"] == ["lee"]
    assert AuditEvent.objects.get(action="org_unit_update", reason="lee leads nlp").after == {"leads": ["lee"]}
    nobody = api.patch(url, {"leads": ["nobody"], "reason": "r"}, format="json")
    assert nobody.status_code == 400 and "leads" in nobody.json()

    members = f"/api/v1/units/{org.nlp.pk}/members/"
    added = api.post(members, {"slurm_username": "alice", "user": "lee", "reason": "joins"}, format="json")
    assert added.status_code == 200
    assert added.json() == [{"user": "lee", "slurm_username": "alice", "slurm_cluster": None}]
    gone = api.post(members + "remove/", {"slurm_username": "alice", "reason": "left"}, format="json")
    assert gone.status_code == 200 and gone.json() == []
    again = api.post(members + "remove/", {"slurm_username": "alice", "reason": "left"}, format="json")
    assert again.status_code == 400 and "not a member" in again.json()["slurm_username"][0]

    namespaces = f"/api/v1/units/{org.nlp.pk}/namespaces/"
    bound = api.post(namespaces, {"cluster": "west", "namespace": "nlp-train", "reason": "their jobs"}, format="json")
    assert bound.status_code == 200 and bound.json()["namespaces"] == ["west/nlp-train"]
    slurm = api.post(namespaces, {"cluster": "lab", "namespace": "x", "reason": "r"}, format="json")
    assert slurm.status_code == 400 and "Kubernetes" in slurm.json()["cluster"][0]
    released = api.post(
        namespaces + "remove/", {"cluster": "west", "namespace": "nlp-train", "reason": "moved"}, format="json"
    )
    assert released.status_code == 200 and released.json()["namespaces"] == []
    actions = list(AuditEvent.objects.filter(unit_path="acme/research/nlp").values_list("action", flat=True))
    for action in ("membership_add", "membership_remove", "namespace_bind", "namespace_unbind"):
        assert action in actions


def test_an_archived_unit_comes_back_with_its_subtree_and_quotas(api, org):
    archived = api.post(f"/api/v1/units/{org.nlp.pk}/archive/", {"reason": "team dissolved"}, format="json")
    assert archived.status_code == 200 and archived.json()["archived"]
    assert api.get("/api/v1/units/?path=acme/research/nlp/llm&archived=false").json()["count"] == 0
    back = api.post(f"/api/v1/units/{org.nlp.pk}/unarchive/", {"reason": "team back"}, format="json")
    assert back.status_code == 200 and not back.json()["archived"]
    assert api.get("/api/v1/units/?path=acme/research/nlp/llm&archived=false").json()["count"] == 1
    assert gpu_quota(org, org.nlp).guarantee == 30
    assert AuditEvent.objects.filter(action="org_unit_unarchive", reason="team back").count() == 1
    # while it was away, research's room was given to vision: it cannot come back as it was
    api.post(f"/api/v1/units/{org.nlp.pk}/archive/", {"reason": "again"}, format="json")
    vision = gpu_quota(org, org.vision)
    grown = api.patch(
        f"/api/v1/quotas/{vision.pk}/", {"guarantee": 55, "reason": "r"}, format="json", HTTP_IF_MATCH=vision.etag
    )
    assert grown.status_code == 200, grown.json()
    refused = api.post(f"/api/v1/units/{org.nlp.pk}/unarchive/", {"reason": "r"}, format="json")
    assert refused.status_code == 400 and refused.json()["violations"]
    assert api.get(f"/api/v1/units/{org.nlp.pk}/").json()["archived"]


def test_a_member_on_one_slurm_cluster_has_an_association_there_only(api, org):
    """Issue #41: memberships are per cluster. A member named on one Slurm cluster (as an import makes
    them) is in that cluster's target only; a member without one is on every Slurm cluster."""
    from quotas.models import ClusterKind
    from quotas.selectors import slurm_target

    lab = services.cluster_set(actor=org.admin, reason="t", name="lab", connection_ref="slurm:lab")
    site = services.cluster_set(
        actor=org.admin, reason="t", name="site", kind=ClusterKind.SLURM, connection_ref="slurm:site"
    )
    members = f"/api/v1/units/{org.vision.pk}/members/"
    on_site = api.post(members, {"slurm_username": "erin", "slurm_cluster": "site", "reason": "site"}, format="json")
    assert on_site.status_code == 200, on_site.json()
    assert on_site.json() == [{"user": None, "slurm_username": "erin", "slurm_cluster": "site"}]
    api.post(members, {"slurm_username": "bob", "reason": "everywhere"}, format="json")
    assert slurm_target(site).members[org.vision.pk] == ("bob", "erin")
    assert slurm_target(lab).members[org.vision.pk] == ("bob",)
    audit = AuditEvent.objects.get(action="membership_add", reason="site")
    assert audit.after == {"user": None, "slurm_username": "erin", "slurm_cluster": "site"}

    kube = api.post(members, {"slurm_username": "erin", "slurm_cluster": "west", "reason": "r"}, format="json")
    assert kube.status_code == 400 and "west is a kubernetes cluster" in kube.json()["slurm_cluster"][0]
    nobody = api.post(members, {"user": "platform-admin", "slurm_cluster": "site", "reason": "r"}, format="json")
    assert nobody.status_code == 400 and "only for a Slurm username" in nobody.json()["slurm_cluster"][0]
    # on site and everywhere are two memberships; removing the one on site leaves the other
    api.post(members, {"slurm_username": "erin", "reason": "everywhere too"}, format="json")
    gone = api.post(
        members + "remove/", {"slurm_username": "erin", "slurm_cluster": "site", "reason": "r"}, format="json"
    )
    assert gone.status_code == 200 and {"user": None, "slurm_username": "erin", "slurm_cluster": None} in gone.json()
    assert slurm_target(lab).members[org.vision.pk] == ("bob", "erin")
    removed = AuditEvent.objects.get(action="membership_remove")
    assert removed.before is not None and removed.before["slurm_cluster"] == "site"
