"""Issue #26 in a real browser (Chromium, headless) at a desktop width and a phone's: the what-if panel
beside the quota form and the rebalance form answers while the lead types (last month replayed with
the typed numbers), and the review page leads with the plan, its picture and the one button that
requests the whole plan — inside the window, never sideways. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from accounting.models import UsageHour
from quotas.models import OrgUnit, Quota
from tests.portal.test_browser import Session, browser, site  # noqa: F401  (fixtures)
from tests.portal.test_browser_second_pass import WIDTHS, no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NOVEMBER = datetime(2026, 11, 1, tzinfo=UTC)


def a_month_of_research():
    """November 2026 for the leaf units of acme/research on a100-80gb: llm-pretrain queues beside its
    guarantee every afternoon; llm-eval uses a quarter of its own; the others half of theirs."""
    rows = []
    quotas = Quota.objects.filter(
        unit__path__startswith="acme/research/", unit__children__isnull=True, flavor__name="a100-80gb",
        resource="nvidia.com/gpu",
    ).select_related("unit")  # fmt: skip
    for q in quotas:
        for h in range(30 * 24):
            busy = q.unit.slug == "llm-pretrain" and 12 <= h % 24 < 20
            held = q.guarantee if busy else q.guarantee // (4 if q.unit.slug == "llm-eval" else 2)
            rows.append(
                UsageHour(unit=q.unit, flavor=q.flavor, hour=NOVEMBER + timedelta(hours=h), minutes=60,
                          guarantee=q.guarantee, allocated=held, within=held, pending=16 if busy else 0)
            )  # fmt: skip
    UsageHour.objects.bulk_create(rows)


def inside_the_window(page, locator):
    box = locator.bounding_box()
    width = page.evaluate("window.innerWidth")
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 1, (box, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_what_if_answers_while_the_lead_types(browser, site, width):  # noqa: F811
    a_month_of_research()
    lead = Session(browser, site, "lead-nlp", width=width)
    pretrain = OrgUnit.objects.get(path="acme/research/nlp/llm-pretrain")
    quota = Quota.objects.get(unit=pretrain, flavor__name="a100-80gb", resource="nvidia.com/gpu")
    page = lead.open(f"/units/{pretrain.pk}/quotas/")
    panel = page.locator("#whatif")
    expect(panel).to_contain_text("Change a GPU number above")
    page.locator(f"#guarantee-{quota.flavor_id}-gpu").fill(str(quota.guarantee + 16))
    expect(panel).to_contain_text("What 2026-11 would have looked like")
    expect(panel.locator(".whatif-changed")).to_contain_text("guarantee 48 → 64")
    expect(panel).to_contain_text("→ 0 h")  # its 16 queued every afternoon fit 16 more guaranteed GPUs
    page.wait_for_load_state("networkidle")
    assert no_sideways_scroll(page)
    inside_the_window(page, panel.locator(".whatif-changed"))
    lead.shot(f"whatif-quota-form-{width}")

    nlp = OrgUnit.objects.get(path="acme/research/nlp")
    page = lead.open(f"/units/{nlp.pk}/rebalance/?flavor={quota.flavor_id}&resource=nvidia.com/gpu")
    eval_ = OrgUnit.objects.get(path="acme/research/nlp/llm-eval")
    page.locator(f"#guarantee-{eval_.pk}").fill("8")
    page.locator(f"#guarantee-{pretrain.pk}").fill("64")
    expect(page.locator("#whatif")).to_contain_text("guarantee 24 → 8")
    page.wait_for_load_state("networkidle")  # the form's own check answers too
    assert no_sideways_scroll(page)
    lead.shot(f"whatif-rebalance-{width}")
    lead.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_review_leads_with_the_plan_and_its_button_is_in_view(browser, site, width):  # noqa: F811
    from accounting.services.review import review_generate

    a_month_of_research()
    review = review_generate(unit=OrgUnit.objects.get(path="acme/research"), month="2026-11", formats=("csv",))
    head = Session(browser, site, "head-research", width=width)
    page = head.open(f"/reviews/{review.pk}/")
    plan = page.locator("section[aria-labelledby=plan-title]")
    expect(plan).to_contain_text("queued")
    button = page.get_by_role("button", name="Request the whole plan as one change")
    expect(button).to_be_visible()
    inside_the_window(page, button)
    assert no_sideways_scroll(page)
    head.shot(f"review-plan-{width}")
    page.get_by_label("Why (added to the change request)").fill("November's review")
    button.click()
    expect(page.locator("h1")).to_contain_text("Change request")
    assert "November's review — governance plan acme/research 2026-11" in page.content()
    head.close()
