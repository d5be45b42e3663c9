"""A past month's review is a record (issue #43 item 1): approving its plan afterwards changes today's
quotas, never what the month says — its tables, its plan and backtest, its budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from accounting.models import Review, UsageHour
from accounting.services.plan import governance_plan, plan_accept
from accounting.services.review import review_generate, review_once
from accounting.services.review_formats import review_files
from accounting.services.review_tables import review_data
from quotas import services
from quotas.models import Quota
from tests.accounting.test_plan_api import BEFORE_NOVEMBER, full  # noqa: F401  (the fixture: November, research all given out)
from tests.accounting.test_review import month  # noqa: F401
from tests.clock import made_on

pytestmark = pytest.mark.django_db


def the_month(org, month, folder: Path) -> tuple[dict[str, bytes], dict, list]:  # noqa: F811
    data = review_data(org.acme, month)
    written = review_files(data, folder, ("csv",))
    files = {p.name: p.read_bytes() for p in written if p.is_file()}
    return files, governance_plan(org.acme, month).as_dict(), data.tables["budgets"]


def test_approving_the_plan_later_leaves_the_month_as_it_was(second_admin, org, full, tmp_path):  # noqa: F811
    files, plan, budgets = the_month(org, full, tmp_path / "before")
    assert plan["items"] and budgets and len(files) > 3  # a plan to accept, budgets (replayed), tables
    guarantees = dict(Quota.objects.values_list("unit__path", "guarantee"))

    request = plan_accept(actor=org.admin, unit=org.acme, month=full, reason="as the review says")
    services.change_request_approve(actor=second_admin, request=request, comment="ok")
    assert dict(Quota.objects.values_list("unit__path", "guarantee")) != guarantees  # today's quotas moved

    again = the_month(org, full, tmp_path / "after")
    assert again[0] == files  # every table of the review, byte for byte
    assert again[1] == plan  # the plan and its backtest
    assert again[2] == budgets  # the budgets table (its replay reads the month's guarantees)


def test_a_rebuild_is_a_new_version_saying_what_differs(second_admin, org, full, django_capture_on_commit_callbacks):  # noqa: F811
    first = review_once(unit=org.acme, month=full)
    assert review_once(unit=org.acme, month=full) == first  # beat's build, redelivered: the same review
    request = plan_accept(actor=org.admin, unit=org.acme, month=full)
    services.change_request_approve(actor=second_admin, request=request, comment="ok")
    second = review_generate(unit=org.acme, month=full)
    assert (second.version, second.differs["version"]) == (2, 1)
    assert second.differs["same_figures"] and second.differs["tables"] == []  # the approval changed no figure
    late = UsageHour.objects.filter(unit=org.nlp, hour__month=11).order_by("hour")[0]
    late.allocated, late.within = 11, 11  # telemetry corrected after the first build
    late.save()
    third = review_generate(unit=org.acme, month=full)
    assert f"review-acme-{full}-csv/units.csv" in third.differs["tables"] and not third.differs["same_figures"]
    held = third.differs["summary"]["allocated_h"]
    assert held["after"] - held["before"] == pytest.approx(10)
    versions = list(Review.objects.filter(unit=org.acme, month=full).values_list("version", flat=True))
    assert sorted(versions) == [1, 2, 3] and Review.objects.get(pk=first.pk).files == first.files


def test_the_review_page_says_which_items_are_in_force_and_offers_only_the_rest(second_admin, org, full, admin_client):  # noqa: F811
    review = review_once(unit=org.acme, month=full)
    page = admin_client.get(f"/reviews/{review.pk}/").content.decode()
    assert "Request the whole plan as one change" in page and "In force" not in page
    request = plan_accept(actor=org.admin, unit=org.acme, month=full)
    services.change_request_approve(actor=second_admin, request=request, comment="ok")
    page = admin_client.get(f"/reviews/{review.pk}/").content.decode()
    items = review.summary["plan"]["items"]
    assert f"{items} of the plan" in page and page.count(f"change request #{request.pk}</a>") == items
    assert "Request the whole plan as one change" not in page and "Request this change" not in page
    second = review_generate(unit=org.acme, month=full)
    page = admin_client.get(f"/reviews/{second.pk}/").content.decode()
    assert "version 2" in page and "Against version 1:" in page and "the same figures" in page


def test_a_price_changed_after_the_month_leaves_its_costs_as_they_were(org, month, tmp_path):  # noqa: F811
    with made_on(BEFORE_NOVEMBER):  # in force all November
        services.flavor_set(actor=org.admin, reason="October price", cluster=org.cluster, name="a100",
                            price_per_device_hour="2.0000")  # fmt: skip
    before = review_data(org.acme, month)
    services.flavor_set(actor=org.admin, reason="December price", cluster=org.cluster, name="a100",
                        price_per_device_hour="3.5000")  # fmt: skip
    after = review_data(org.acme, month)
    assert before.summary["cost"] is not None and after.summary["cost"] == before.summary["cost"]
    assert [u["cost"] for u in after.tables["units"]] == [u["cost"] for u in before.tables["units"]]


def test_a_recommendation_that_needs_another_names_it(org, full, admin_client):  # noqa: F811
    """Issue #42: "needs recommendations 8, 7, 13" pointed at positions the page never numbers."""
    data = review_data(org.acme, full)
    [vision] = [r for r in data.tables["recommendations"] if r["unit_path"] == "acme/research/vision"]
    assert vision["needs_items"] == "acme/research/nlp west/a100"
    review = review_once(unit=org.acme, month=full)
    page = admin_client.get(f"/reviews/{review.pk}/").content.decode()
    assert "it needs the change to acme/research/nlp west/a100 (they make room for it)" in page
