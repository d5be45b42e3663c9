"""The pool table of Example 8.2's cluster in a real browser (Chromium, headless) at a desktop width and a
phone's: Table 9's before-state readable at a glance, the bar beside each pool, no sideways scroll;
the findings page names the mismatch. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounting.demo_fleet import fleet_demo_findings, load_fleet_demo
from tests.portal.test_browser import Session, browser, site  # noqa: F401  (fixtures)
from tests.portal.test_browser_second_pass import WIDTHS, no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_pool_table_of_example_8_2_at_both_widths(browser, site, width):  # noqa: F811
    load_fleet_demo()
    fleet_demo_findings()
    head = Session(browser, site, "head-fleet-lab", width=width)
    page = head.open("/pools/?month=2026-10")
    table = page.locator("table#pools")
    expect(table).to_be_visible()
    assert no_sideways_scroll(page)
    rows = {r.locator("td").first.inner_text(): r for r in table.locator("tbody tr").all()}
    assert (
        "95.0 %" in rows["example-8-2/a100-80gb"].inner_text()
        and "72.0 %" in rows["example-8-2/a100-80gb"].inner_text()
    )
    assert (
        "64.2 %" in rows["example-8-2/a100-40gb"].inner_text() and "0.0 %" in rows["example-8-2/v100-32gb"].inner_text()
    )
    bar = rows["example-8-2/a100-80gb"].get_by_role("img")
    assert bar.get_attribute("aria-label") == "95.0 % allocated"
    head.shot(f"pools-example-8-2-{width}")
    findings = head.open("/findings/")
    expect(findings.get_by_text("sat mostly idle in 744 of 744 hours").first).to_be_visible()
    expect(findings.get_by_text("research: 372 workloads").first).to_be_visible()
    head.shot(f"findings-mismatch-{width}")
    head.close()
