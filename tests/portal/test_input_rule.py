"""One input rule for every route (issue #42): a NUL byte in a path, query string or form field is refused
with 400 and what to do — on PostgreSQL it reached the database and answered 500 — and ids, digits, reasons
and request ids that are not what they claim are refused or not found, never a server error."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from quotas.models import AuditEvent, ChangeRequest, OrgUnit

pytestmark = pytest.mark.django_db

URLS = [
    "/api/v1/clusters/%00/",
    "/api/v1/pools/?within=%00",
    "/api/v1/units/?path=%00",
    "/api/v1/usage/?unit=%00",
    "/fairness/?within=%00",
    "/pools/?within=%00",
    "/usage/?unit=%00",
    "/audit/?unit=%00",
]


@pytest.fixture
def viewer(demo):
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.get(username="lead-nlp"))
    return client


@pytest.mark.parametrize("url", URLS)
def test_a_nul_byte_in_a_path_or_query_is_a_400_that_says_what_to_do(viewer, url):
    response = viewer.get(url)
    assert response.status_code == 400, (url, response.status_code)
    text = response.content.decode()
    assert "NUL byte (%00)" in text and "remove it" in text
    if url.startswith("/api/"):
        assert response["Content-Type"] == "application/json"


ADMIN_FORMS = [  # (page, the form, the field that held a NUL): each was a 500 on PostgreSQL
    ("setup", {"action": "cluster", "name": "x", "kind": "kubernetes", "connection_ref": "in-cluster"}, "name"),
    ("setup", {"action": "flavor", "name": "x", "accelerator_model": "A", "physical_devices": "4"}, "name"),
    ("unit", {"action": "leads", "leads": "lead-nlp"}, "leads"),
    ("unit", {"action": "member_add", "slurm_username": "x"}, "slurm_username"),
    ("unit", {"action": "member_remove", "slurm_username": "alice"}, "slurm_username"),
    ("unit", {"action": "bind", "cluster": "1", "namespace": "x"}, "namespace"),
    ("unit", {"action": "move", "parent": "acme"}, "parent"),
]


@pytest.mark.parametrize(("page", "form", "field"), ADMIN_FORMS)
def test_a_nul_byte_in_an_admin_form_is_refused_naming_the_field(demo, page, form, field):
    admin = Client(raise_request_exception=False)
    admin.force_login(User.objects.get(username="admin"))
    nlp = OrgUnit.objects.get(path="acme/research/nlp")
    url = "/setup/" if page == "setup" else f"/units/{nlp.pk}/administer/"
    before = AuditEvent.objects.count()
    response = admin.post(url, {**form, field: form[field] + "\x00", "reason": "r"}, follow=True)
    assert response.status_code == 200, response.status_code
    assert f"{field}: contains the control character U+0000" in response.content.decode()
    assert AuditEvent.objects.count() == before


def test_ids_that_are_not_ascii_numbers_are_not_found_not_server_errors(demo):
    admin = Client(raise_request_exception=False)
    admin.force_login(User.objects.get(username="admin"))
    approve = admin.post("/api/v1/change-requests/abc/approve/", {"comment": ""}, content_type="application/json")
    assert approve.status_code == 404
    nlp = OrgUnit.objects.get(path="acme/research/nlp")
    what_if = admin.post(f"/units/{nlp.pk}/what-if/", {"flavor": "²", "resource": "nvidia.com/gpu"})
    assert what_if.status_code == 200


@pytest.mark.parametrize("mark", ["\u202e", "\u2066", "\x00"])
def test_a_reason_with_a_bidi_control_or_nul_is_refused_naming_the_reason(demo, mark):
    admin = Client(raise_request_exception=False)
    admin.force_login(User.objects.get(username="admin"))
    nlp = OrgUnit.objects.get(path="acme/research/nlp")
    before = AuditEvent.objects.count()
    response = admin.patch(
        f"/api/v1/units/{nlp.pk}/",
        {"weight": 7, "reason": f"approved{mark}devorppa ton"},
        content_type="application/json",
    )
    assert response.status_code == 400 and "reason" in response.json(), response.content
    assert OrgUnit.objects.get(pk=nlp.pk).weight != 7
    assert AuditEvent.objects.count() == before and not ChangeRequest.objects.exists()
