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
    what = locator.evaluate("e => e.tagName + ' ' + e.textContent.trim().slice(0, 40)")
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 1, (page.url, what, box, width)


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


@pytest.mark.parametrize("width", WIDTHS)
def test_quota_bars_are_readable_at_both_widths(browser, site, width):  # noqa: F811
    """Issue #27.9: the bars' numbers were twice the page's text at 1440 px and too small at 390 px
    (an SVG scaled with the window); now they are the page's own text, and never sideways."""
    lead = Session(browser, site, "lead-nlp", width=width)
    for path in (f"/units/{OrgUnit.objects.get(path='acme/research/nlp').pk}/", "/capacity/"):
        page = lead.open(path)
        caption = page.locator(".hbar-caption").first
        expect(caption).to_be_visible()
        size = float(caption.evaluate("e => parseFloat(getComputedStyle(e).fontSize)"))
        assert 12 <= size <= 16, (path, size)
        inside_the_window(page, caption)
        assert no_sideways_scroll(page)
    lead.shot(f"capacity-bars-{width}")
    lead.close()


PAGES = {  # page: its key column (the last one, where the action or the state is)
    "/clusters/": "Files",
    "/showback/?month=2026-11": "Lent credit",
    "/fairness/?month=2026-11": "Did not fit",
    "/usage/sources/": None,
    "/capacity/": None,
}


@pytest.mark.parametrize("width", WIDTHS)
def test_every_tables_key_column_is_in_the_window(browser, site, width):  # noqa: F811
    """Issue #27.7: at 1440 px wide tables hid their last columns (sync and drift, costs, fairness's
    verdict), at 390 px every table showed its first two or three. Text cells wrap; on a phone the
    tables stack (a card per row, each value beside its column's name)."""
    a_month_of_research()
    admin = Session(browser, site, "admin", width=width)
    nlp = OrgUnit.objects.get(path="acme/research/nlp")
    for path, key in {**PAGES, f"/units/{nlp.pk}/history/": "Why"}.items():
        page = admin.open(path)
        assert no_sideways_scroll(page), path
        for table in page.locator(".scroll > table").all():
            last = table.locator("thead th").last if width > 640 else table.locator("tbody tr").first.locator("td").last
            if last.count() and last.is_visible():
                inside_the_window(page, last)
        if key and width > 640:
            header = page.locator("thead th", has_text=key).first
            expect(header).to_be_visible()
            inside_the_window(page, header)
        if key and width <= 640:
            cell = page.locator(f'td[data-label="{key}"]').first
            expect(cell).to_be_visible()
            inside_the_window(page, cell)
        admin.shot(f"table{path.replace('/', '-').split('?')[0]}{width}")
    admin.close()
