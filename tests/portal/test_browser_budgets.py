"""Budgets in a real browser (Chromium, headless) at a desktop width and a phone's: the unit page's
burn-down (three lines named where they end, today marked, no sideways scroll) and the budget form
refusing a negative budget beside its field. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from accounting.models import UsageHour
from accounting.services.budgets import budgets_evaluate
from quotas import services
from quotas.models import Budget, OrgUnit, ResourceFlavor
from quotas.services import BudgetChange
from tests.portal.test_browser import SHOTS, Session, browser, site  # noqa: F401  (fixtures)
from tests.portal.test_browser_second_pass import WIDTHS, no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def spending_vision() -> tuple[OrgUnit, ResourceFlavor]:
    """vision with a month's budget it spends at 40 GPUs all month (since the 1st)."""
    vision, a100 = OrgUnit.objects.get(path="acme/research/vision"), ResourceFlavor.objects.get(name="a100-80gb")
    admin = User.objects.get(username="admin")
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    hours = max(1, int((now - start).total_seconds() // 3600))
    budget = int(40 * 24 * 30 * 0.8)  # 80 % of what 40 GPUs use in 30 days: runs out about the 24th
    services.budget_set(
        actor=admin, reason="t", change=BudgetChange(vision.pk, a100.pk, device_hours=budget, action="hold")
    )
    UsageHour.objects.filter(unit=vision, flavor=a100, hour__gte=start).delete()
    UsageHour.objects.bulk_create(
        UsageHour(unit=vision, flavor=a100, hour=start + timedelta(hours=h), minutes=60, allocated=40, within=40)
        for h in range(hours)
    )
    budgets_evaluate(now=now)
    return vision, a100


@pytest.mark.parametrize("width", WIDTHS)
def test_the_burn_down_reads_without_a_legend_at_both_widths(browser, site, width):  # noqa: F811
    vision, _ = spending_vision()
    viewer = Session(browser, site, "lead-vision", width=width)
    page = viewer.open(f"/units/{vision.pk}/#budgets")
    figure = page.locator("figure.budget").first
    expect(figure).to_be_visible()
    assert no_sideways_scroll(page)
    labels = figure.locator("svg text").evaluate_all("els => els.map(e => e.textContent)")
    assert any(t.startswith("left: ") for t in labels) and "plan: 0 at period end" in labels and "today" in labels
    assert any(t.startswith("forecast: ") for t in labels)
    for line in ("actual", "plan"):
        assert figure.locator(f"polyline.{line}").count() == 1
    box = figure.locator("svg").bounding_box()
    assert box is not None and box["width"] >= min(600, width - 80)  # legible on a phone: it scrolls in its box
    figure.scroll_into_view_if_needed()
    viewer.shot(f"budget-burn-down-{width}")
    figure.screenshot(path=str(SHOTS / f"budget-chart-{width}.png"))
    viewer.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_budget_form_refuses_a_negative_budget_at_its_field(browser, site, width):  # noqa: F811
    head = Session(browser, site, "head-research", width=width)
    nlp, a100 = OrgUnit.objects.get(path="acme/research/nlp"), ResourceFlavor.objects.get(name="a100-80gb")
    page = head.open(f"/units/{nlp.pk}/budgets/")
    assert no_sideways_scroll(page)
    hours = page.locator(f"#b{a100.pk}-device_hours")
    hours.fill("-10")
    page.get_by_label("Why").fill("december plan")
    page.get_by_role("button", name="Save").click()
    message = page.locator(f"#err-b{a100.pk}-device_hours")
    expect(message).to_contain_text("outside 0")
    expect(page.locator(f"#b{a100.pk}-device_hours")).to_have_value("-10")
    head.shot(f"budget-form-error-{width}")
    page.locator(f"#b{a100.pk}-device_hours").fill("12000")
    page.get_by_label("Why").fill("december plan")
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Saved 1 budget change").wait_for()
    assert Budget.objects.get(unit=nlp, flavor=a100).device_hours == 12000
    refused = [e for e in head.errors if "status of 400" in e]
    assert len(refused) == 1  # the refused save answers 400 (the browser logs it); nothing else went wrong
    head.errors = [e for e in head.errors if e not in refused]
    head.close()
