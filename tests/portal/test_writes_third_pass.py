"""Issue #27 (items 3-6): no lost update through the portal, a create never updates, text cells stay
text in every export, writes answer what they did, and odd input is a clear 4xx, never a 500."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client

from accounting.services.review_formats import as_text
from quotas.models import Quota
from tests.portal.test_pages import _rebalance_form, field, form_for, gpu, signed_in, unit

pytestmark = pytest.mark.django_db


# --- 3. lost update ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [None, "", "abc", "²", "4²"])
def test_the_quota_form_without_a_valid_version_is_refused_and_saves_nothing(demo, version):
    lead = signed_in("lead-nlp")
    nlp = unit("acme/research/nlp")
    data = form_for(lead, nlp)
    before = gpu(nlp.path)
    key = field(nlp, "version")
    if version is None:
        del data[key]
    else:
        data[key] = version
    data[field(nlp, "guarantee")] = str(before.guarantee - 1)
    data["reason"] = "edit"
    answer = lead.post(f"/units/{nlp.pk}/quotas/", data)
    assert answer.status_code == 400
    assert "reload the page" in answer.content.decode()
    after = gpu(nlp.path)
    assert (after.guarantee, after.version) == (before.guarantee, before.version)


def test_rebalance_without_a_valid_version_is_refused(demo):
    head = signed_in("head-research")
    research, vision = unit("acme/research"), unit("acme/research/vision")
    data = _rebalance_form(head, research)
    before = gpu(vision.path)
    data[f"version-{vision.pk}"] = "x"
    data[f"guarantee-{vision.pk}"] = str(before.guarantee - 1)
    data["reason"] = "move"
    answer = head.post(f"/units/{research.pk}/rebalance/", data)
    assert answer.status_code == 400 and "reload the page" in answer.content.decode()
    assert gpu(vision.path).version == before.version


def test_post_quotas_never_updates_an_existing_quota(demo, admin_client: Client):
    q = gpu("acme/research/nlp")
    body = {
        "unit": q.unit_id, "flavor": q.flavor_id, "resource": "nvidia.com/gpu", "guarantee": 1, "version": q.version,
        "reason": "create",
    }  # fmt: skip
    answer = admin_client.post("/api/v1/quotas/", body, content_type="application/json")
    assert answer.status_code == 412, answer.content  # its version is not 0: stale for a create; PATCH it
    assert Quota.objects.get(pk=q.pk).guarantee == q.guarantee


def test_if_match_with_unicode_digits_is_stale_not_a_server_error(demo, admin_client: Client):
    q = gpu("acme/research/nlp")
    answer = admin_client.patch(
        f"/api/v1/quotas/{q.pk}/", {"guarantee": 1, "reason": "r"}, content_type="application/json",
        HTTP_IF_MATCH=f'"q{q.pk}-v²"',
    )  # fmt: skip
    assert answer.status_code == 412


# --- 4. formula injection ----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tx"])
def test_text_that_starts_like_a_formula_is_written_as_text(text):
    assert as_text(text) == "'" + text
    assert as_text("more GPUs for nlp") == "more GPUs for nlp"


def test_a_reason_is_never_a_formula_in_the_reviews_csv_and_xlsx(demo, tmp_path):
    from datetime import UTC, datetime

    from openpyxl import load_workbook

    from accounting.services.review_formats import write_csv, write_xlsx
    from accounting.services.review_tables import ReviewData

    evil = '=HYPERLINK("http://attacker.example","click")'
    from accounting.services.review_tables import COLUMNS

    tables: dict[str, list[dict[str, object]]] = {t: [] for t in COLUMNS}
    tables["quota_changes"] = [
        {"at": "2020-05-02", "actor": "lead-nlp", "unit_path": "acme/nlp", "what": "quota", "reason": evil}
    ]
    data = ReviewData(
        unit_path="acme", month="2020-05", generated_at=datetime(2020, 6, 1, tzinfo=UTC), tables=tables,
        summary={"cost": "1234.50", "units": 3},
    )  # fmt: skip
    [changes] = [p for p in write_csv(data, tmp_path) if p.name == "quota_changes.csv"]
    row = list(csv.reader(io.StringIO(changes.read_text())))[1]
    assert row[4] == "'" + evil
    book = load_workbook(write_xlsx(data, tmp_path / "review.xlsx"))
    cell = book["quota_changes"]["E2"]
    assert cell.data_type == "s" and cell.value == evil  # a string cell, not a formula
    cost = next(row[1] for row in book["summary"].iter_rows() if row[0].value == "cost")
    assert cost.value == 1234.5 and cost.data_type == "n"  # issue #27.8: the summary's cost is a number


# --- 5. writes answer what they did ----------------------------------------------------------------


def _pending_request():
    from django.contrib.auth.models import User

    from quotas import services
    from quotas.policy import Resource

    q = gpu("acme/research/nlp")
    change = services.QuotaChange(q.unit_id, q.flavor_id, Resource.GPU, q.guarantee - 1, q.burst, 0, q.version)
    return services.change_request_submit(
        actor=User.objects.get(username="lead-nlp"), reason="a smaller footprint", changes=[change]
    )


@pytest.mark.parametrize("decision", [None, "maybe", ""])
def test_a_request_page_post_without_approve_or_reject_decides_nothing(demo, decision):
    request = _pending_request()
    admin = signed_in("admin")
    body = {"comment": "?"} if decision is None else {"decision": decision, "comment": "?"}
    admin.post(f"/requests/{request.pk}/", body)
    request.refresh_from_db()
    assert request.status == "pending"


def test_a_change_request_naming_one_quota_twice_is_refused_at_submission(demo):
    from quotas import services
    from quotas.errors import InputError
    from quotas.policy import Resource

    q = gpu("acme/research/nlp")
    lead = signed_in("lead-nlp")
    user = lead.session.get("_auth_user_id")
    from django.contrib.auth.models import User

    actor = User.objects.get(pk=user)
    twice = [
        services.QuotaChange(q.unit_id, q.flavor_id, Resource.GPU, q.guarantee + 1, q.burst, q.lendable, q.version),
        services.QuotaChange(q.unit_id, q.flavor_id, Resource.GPU, q.guarantee + 2, q.burst, q.lendable, q.version),
    ]
    with pytest.raises(InputError, match="appears twice"):
        services.change_request_submit(actor=actor, reason="twice", changes=twice)


# --- 6. odd input is a 4xx ---------------------------------------------------------------------------


@pytest.mark.parametrize("month", ["2020-13", "0000-01", "9999-12"])
def test_months_out_of_range_are_refused_with_the_form(demo, month, admin_client: Client):
    showback = admin_client.get("/showback/", {"month": month})
    assert showback.status_code == 200 and "choose a month" in showback.content.decode()
    fairness = admin_client.get("/fairness/", {"month": month})
    assert fairness.status_code in (200, 400)
    api = admin_client.post("/api/v1/reviews/build/", {"unit": "acme", "month": month}, content_type="application/json")
    assert api.status_code == 400 and "month" in api.json()


@pytest.mark.parametrize("value", ["abc", "²", "1e3"])
def test_non_numeric_ids_in_forms_are_not_found_not_errors(demo, value, admin_client: Client):
    nlp = unit("acme/research/nlp")
    reviews = admin_client.post("/reviews/", {"unit": value, "month": "2020-05"})
    assert reviews.status_code == 404
    administer = admin_client.post(
        f"/units/{nlp.pk}/administer/", {"action": "namespace_unbind", "binding": value, "reason": "r"}
    )
    assert administer.status_code in (302, 400, 404)
    setup = admin_client.post("/setup/", {"action": "flavor", "cluster": value, "reason": "r", "name": "x",
                                          "physical_devices": "4", "device_memory_gb": value})  # fmt: skip
    assert setup.status_code in (200, 302, 400)


# --- 1. reviews carry costs: showback's read rule ------------------------------------------------


def test_a_review_and_its_files_follow_showbacks_read_rule(demo, settings):
    from django.utils import timezone

    from accounting.models import Review, ReviewFile

    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    research = unit("acme/research")
    review = Review.objects.create(unit=research, month="2020-05", generated_at=timezone.now(), files={"u.csv": "x"})
    ReviewFile.objects.create(review=review, name="u.csv", content=b"unit,cost\nnlp,12.00\n", sha256="x", size=20)
    for outsider in ("viewer", "head-production"):
        client = signed_in(outsider)
        assert client.get(f"/reviews/{review.pk}/").status_code == 403
        assert client.get(f"/reviews/{review.pk}/files/u.csv").status_code == 403
        assert client.get(f"/api/v1/reviews/{review.pk}/").status_code == 404
        assert client.get("/api/v1/reviews/").json()["count"] == 0
        assert "2020-05" not in client.get("/reviews/").content.decode()
    head = signed_in("head-research")
    assert head.get(f"/reviews/{review.pk}/files/u.csv").content == b"unit,cost\nnlp,12.00\n"
    assert head.get("/api/v1/reviews/").json()["count"] == 1
    settings.ALLOT_SHOWBACK_VISIBILITY = "everyone"
    assert signed_in("viewer").get(f"/reviews/{review.pk}/").status_code == 200


# --- 2. the audit trail: one read rule -------------------------------------------------------------


def test_the_audit_trail_shows_each_event_only_to_whoever_may_read_what_it_records(demo, settings):
    from quotas.models import AuditEvent

    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    request = _pending_request()
    nlp = unit("acme/research/nlp")
    secret = request.reason
    outsider = signed_in("lead-serving")  # leads a team elsewhere: may not read nlp's request
    assert outsider.get(f"/requests/{request.pk}/").status_code == 403
    listed = outsider.get("/api/v1/audit/", {"page_size": 500}).json()["results"]
    assert not [e for e in listed if e["object_type"] == "changerequest" and e["object_id"] == str(request.pk)]
    assert secret not in outsider.get(f"/units/{nlp.pk}/history/").content.decode()
    page = outsider.get(f"/units/{nlp.pk}/").content.decode()
    assert f"/requests/{request.pk}/" not in page  # no link that would answer 403
    insider = signed_in("lead-nlp")
    mine = insider.get("/api/v1/audit/", {"page_size": 500}).json()["results"]
    assert [e for e in mine if e["object_type"] == "changerequest" and e["object_id"] == str(request.pk)]
    assert secret in insider.get(f"/units/{nlp.pk}/history/").content.decode()
    AuditEvent.objects.create(
        at=request.created_at, actor_name="system", action="finding_open", object_type="finding", object_id="1",
        object_repr="#1 nlp holds 40 idle GPUs", unit_path=nlp.path, reason="detected",
    )  # fmt: skip
    assert "nlp holds 40 idle GPUs" not in str(outsider.get("/api/v1/audit/", {"page_size": 500}).json())
    assert "nlp holds 40 idle GPUs" in str(insider.get("/api/v1/audit/", {"page_size": 500}).json())


def test_workload_records_follow_the_usage_read_rule(demo, settings):
    from accounting.models import WorkloadRecord
    from quotas.models import Cluster

    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    nlp = unit("acme/research/nlp")
    WorkloadRecord.objects.create(
        cluster=Cluster.objects.get(name="k8s-west"), scheduler_id="w-1", unit=nlp, owner="alice", job_id="nlp/secret"
    )
    assert signed_in("lead-serving").get("/api/v1/workload-records/").json()["count"] == 0
    assert signed_in("lead-nlp").get("/api/v1/workload-records/").json()["count"] == 1


def test_a_member_is_added_on_one_slurm_cluster_from_the_unit_page(demo, admin_client: Client):
    """Issue #41: the members form offers every Slurm cluster or one; the list says which."""
    from quotas.models import Cluster, Membership

    nlp = unit("acme/research/nlp")
    lab = Cluster.objects.get(name="slurm-lab")
    page = admin_client.get(f"/units/{nlp.pk}/").content.decode()
    assert (
        '<option value="">every Slurm cluster</option>' in page and f'<option value="{lab.pk}">slurm-lab only' in page
    )
    url = f"/units/{nlp.pk}/administer/"
    form = {"action": "member_add", "slurm_username": "zoe", "slurm_cluster": str(lab.pk), "reason": "lab only"}
    admin_client.post(url, form)
    assert Membership.objects.get(unit=nlp, slurm_username="zoe").slurm_cluster == lab
    assert 'zoe <span class="muted">on slurm-lab only</span>' in admin_client.get(f"/units/{nlp.pk}/").content.decode()
    wrong = admin_client.post(url, {**form, "slurm_username": "yan", "slurm_cluster": "999999"}, follow=True)
    assert "no such Slurm cluster" in wrong.content.decode()
    assert not Membership.objects.filter(slurm_username="yan").exists()  # refused, nothing saved
