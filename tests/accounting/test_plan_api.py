"""The governance plan through the API and the services (issue #26): read as the review's read rule
says, accepted whole as one change request (applied atomically by someone above every unit it
changes; planning again then proposes nothing), items accepted only together with the items that
make room for them, demand no parent can give named, and the what-if endpoint."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounting.services.plan import governance_plan
from quotas import services
from quotas.models import AuditEvent, ChangeRequest, Quota
from quotas.policy import Resource
from tests.accounting.test_review import month  # noqa: F401  (the fixture: November 2026, every hour)
from tests.clock import made_on
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"


def gpus(org, unit, guarantee, burst=None, lendable=None, *, at=None):
    """Set a GPU quota through the service, as if on ``at`` (a past month's plan reads the terms in
    force at its end: a change made after it is not part of it)."""
    change = services.QuotaChange(unit.pk, org.flavor.pk, Resource.GPU, guarantee, burst, lendable)
    with made_on(at or datetime.now(tz=UTC)):
        services.quota_set_bulk(actor=org.admin, reason="test", changes=[change])


BEFORE_NOVEMBER = datetime(2026, 10, 31, 12, tzinfo=UTC)


@pytest.fixture
def full(org, month):  # noqa: F811
    """research (60) is all given out since October: nlp 40 (1 held), vision 20 (25 held, 2 queued)."""
    gpus(org, org.nlp, 40, at=BEFORE_NOVEMBER)
    return month


def test_the_whole_plan_is_one_change_request_and_the_month_keeps_its_plan_once_applied(
    second_admin, org, full, admin_client
):
    plan = admin_client.get("/api/v1/plans/", {"unit": "acme", "month": full}).json()
    items = {i["unit_path"]: i for i in plan["items"]}
    assert items["acme/research/nlp"]["guarantee"] == [40, 20]  # down to what its project llm holds
    assert items["acme/research/vision"]["guarantee"] == [20, 27]  # its p95 of held + queued
    vision, nlp = items["acme/research/vision"], items["acme/research/nlp"]
    assert vision["needs"] == [nlp["index"]] and nlp["needs"] == []  # research is full: vision needs nlp's room

    alone = admin_client.post(
        "/api/v1/plans/accept/", {"unit": "acme", "month": full, "items": [vision["index"]]},
        content_type="application/json",
    )  # fmt: skip
    assert alone.status_code == 400 and f"add items {nlp['index']}" in str(alone.json())
    assert ChangeRequest.objects.count() == 0  # nothing recorded

    long = admin_client.post(
        "/api/v1/plans/accept/", {"unit": "acme", "month": full, "reason": "x" * 3990},
        content_type="application/json",
    )  # fmt: skip
    assert long.status_code == 400 and "left beside the plan's summary" in str(long.json())  # was cut to 2,000
    assert ChangeRequest.objects.count() == 0
    whole = admin_client.post(
        "/api/v1/plans/accept/", {"unit": "acme", "month": full, "reason": "May's review"},
        content_type="application/json",
    )  # fmt: skip
    assert whole.status_code == 201
    request = ChangeRequest.objects.get(pk=whole.json()["change_request"])
    assert len(request.changes) == len(plan["items"]) and request.reason.startswith("May's review — governance plan")
    assert AuditEvent.objects.filter(action="change_request_submit", object_id=str(request.pk)).exists()
    services.change_request_approve(actor=second_admin, request=request, comment="as planned")
    quota = {q.unit.path: q.guarantee for q in Quota.objects.filter(resource=GPU).select_related("unit")}
    assert (quota["acme/research/nlp"], quota["acme/research/vision"]) == (20, 27)
    # November's plan is a record of November (issue #43): the same items, now in force and said so,
    # and not offered again
    again = admin_client.get("/api/v1/plans/", {"unit": "acme", "month": full}).json()
    assert [(i["unit_path"], i["guarantee"]) for i in again["items"]] == [
        (i["unit_path"], i["guarantee"]) for i in plan["items"]
    ]
    assert all(i["in_force"] for i in again["items"]) and not any(i["in_force"] for i in plan["items"])
    twice = admin_client.post("/api/v1/plans/accept/", {"unit": "acme", "month": full}, content_type="application/json")
    assert twice.status_code == 400 and "in force already" in str(twice.json())
    assert ChangeRequest.objects.count() == 1


def test_demand_the_parent_cannot_give_is_named_with_what_would_have_to_give(org, month, admin_client):  # noqa: F811
    gpus(org, org.research, 70, at=BEFORE_NOVEMBER)  # acme (100) gives research 70 and ops 30: no room for ops
    plan = governance_plan(org.acme, month)
    assert all(i.unit != org.ops.pk or i.after.guarantee == 30 for i in plan.plan.items)
    (unmet,) = [u for u in plan.plan.unmet if u.parent == "acme"]
    assert unmet.units == ("acme/ops",) and unmet.devices == 10
    assert "capacity on west/a100" in unmet.gives and "top-level" in unmet.gives


def test_the_plan_follows_the_reviews_read_rule(org, month, client, settings):  # noqa: F811
    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    outsider, head = UserFactory(), UserFactory()
    org.ops.leads.add(outsider)
    org.acme.leads.add(head)
    client.force_login(outsider)
    assert client.get("/api/v1/plans/", {"unit": "acme/research", "month": month}).status_code == 404
    assert client.post("/api/v1/backtest/", {"unit": "acme/research", "month": month, "changes": []},
                       content_type="application/json").status_code == 404  # fmt: skip
    client.force_login(head)
    assert client.get("/api/v1/plans/", {"unit": "acme/research", "month": month}).status_code == 200


def test_the_what_if_answers_the_same_replay_and_names_bad_fields(org, month, admin_client):  # noqa: F811
    ask = {"unit": "acme", "month": month, "changes": [{"unit": "acme/ops", "flavor": "west/a100", "guarantee": 40}]}
    answer = admin_client.post("/api/v1/backtest/", ask, content_type="application/json").json()
    ops = next(u for u in answer["units"] if u["unit_path"] == "acme/ops")
    assert ops["changed"] and ops["today"]["queued_h"] == 7200 and ops["proposed"]["queued_h"] == 0
    assert (
        answer["violations"] == [] and answer["totals"]["proposed"]["queued_h"] < answer["totals"]["today"]["queued_h"]
    )
    bad = admin_client.post(
        "/api/v1/backtest/",
        {"unit": "acme", "month": "2026-13", "changes": [{"unit": "acme/nope", "flavor": "west/a100"}]},
        content_type="application/json",
    )
    assert bad.status_code == 400 and "month" in bad.json()
    bad = admin_client.post(
        "/api/v1/backtest/", {**ask, "changes": [{"unit": "acme/nope", "flavor": "west/a100"}]},
        content_type="application/json",
    )  # fmt: skip
    assert bad.status_code == 400 and "changes[0].unit" in bad.json()
    over = admin_client.post(
        "/api/v1/backtest/", {**ask, "changes": [{"unit": "acme/ops", "flavor": "west/a100", "guarantee": 80}]},
        content_type="application/json",
    ).json()  # fmt: skip
    assert [v["code"] for v in over["violations"]] == ["children_exceed_guarantee"]


def test_the_what_if_panel_beside_the_quota_form(org, month, admin_client):  # noqa: F811
    row = Quota.objects.get(unit=org.ops, flavor=org.flavor, resource=GPU)
    prefix = f"{org.flavor.pk}-gpu"
    page = admin_client.post(
        f"/units/{org.ops.pk}/what-if/",
        {
            f"guarantee-{prefix}": "40",
            f"burst-{prefix}": "0",
            f"lendable-{prefix}": "0",
            f"version-{prefix}": row.version,
        },
    )
    text = page.content.decode()
    assert page.status_code == 200 and "What 2026-11 would have looked like" in text
    assert "Queued 7,200 → 0 device-hours" in text  # ops' 7,200 are served
    empty = admin_client.post(f"/units/{org.ops.pk}/what-if/", {}).content.decode()
    assert "Change a GPU number above" in empty


def test_a_reviews_plan_is_requested_once(org, full, django_capture_on_commit_callbacks):
    """The review page's one button: the review's plan as one change request, recorded on the review,
    audited; pressed again (or by another head) it answers with the same request."""
    from accounting.services.review import review_generate
    from accounting.services.review_accept import review_accept_plan

    review = review_generate(unit=org.acme, month=full, formats=("csv",))
    first = review_accept_plan(actor=org.admin, review=review, reason="as the review says")
    again = review_accept_plan(actor=org.admin, review=review)
    assert first == again and ChangeRequest.objects.count() == 1
    review.refresh_from_db()
    assert review.summary["plan_change_request"] == first.pk
    assert AuditEvent.objects.filter(action="review_accept_plan").count() == 1
    assert len(first.changes) == review.summary["plan"]["items"]
