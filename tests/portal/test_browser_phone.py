"""The portal on a phone (issue #42, 390 × 844): the navigation folds behind one Menu button (it took 27 %
of the screen), and the Clusters table reads as cards, not a letter per line."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.portal.test_browser import Session, browser, site  # noqa: F401  (fixtures)
from tests.portal.test_browser_second_pass import no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_navigation_folds_behind_a_menu_on_a_phone_and_not_on_a_desktop(browser, site):  # noqa: F811
    phone = Session(browser, site, "admin", width=390)
    page = phone.open("/clusters/")
    header = page.locator("header").bounding_box()
    assert header["height"] <= 0.12 * 900, header  # one line: the brand, Menu, who is signed in
    links = page.locator("#main-nav")
    expect(links).to_be_hidden()
    page.get_by_role("button", name="Menu").click()
    expect(links).to_be_visible()
    assert page.get_by_role("button", name="Menu").get_attribute("aria-expanded") == "true"
    page.get_by_role("link", name="Findings").click()
    page.wait_for_url(lambda url: url.endswith("/findings/"))
    phone.close()
    desktop = Session(browser, site, "admin", width=1440)
    page = desktop.open("/clusters/")
    expect(page.locator("#main-nav")).to_be_visible()
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
    desktop.close()


def test_the_clusters_table_reads_as_cards_on_a_phone(browser, site):  # noqa: F811
    phone = Session(browser, site, "admin", width=390)
    page = phone.open("/clusters/")
    assert no_sideways_scroll(page)
    phone.shot("clusters-390")
    narrow = page.evaluate(
        """() => [...document.querySelectorAll('table.stacks td')].map(td => {
            const r = document.createRange(); r.selectNodeContents(td);
            const lines = new Set([...r.getClientRects()].map(b => Math.round(b.top))).size;
            const text = td.textContent.trim();
            return [td.getAttribute('data-label'), lines, text.slice(0, 30), text.length]; })
          .filter(([label, lines, text, length]) => lines > 2 + length / 12)"""
    )  # "k8s-west" was eight lines of one letter: the cell's <br>-parts were squeezed side by side
    assert narrow == [], f"cells squeezed to a few letters a line: {narrow}"
    phone.close()
