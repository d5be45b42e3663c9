"""The lead's everyday task in a real browser at a desktop width and a phone's (issue #42): from the
team page a project's guarantee is lowered in three clicks, and a change above the team's envelope is
sent from the same form as one change request; the approver sees it waiting on every page and decides
it with what the units hold, the room above, their usage and each cluster's change in view.
Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from quotas.models import ChangeRequest, Quota
from tests.portal.test_browser import Session, browser, gpu, site  # noqa: F401  (fixtures)
from tests.portal.test_browser_second_pass import no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def room(path):
    q = gpu(path)
    kids = Quota.objects.filter(unit__parent=q.unit, flavor=q.flavor, resource=q.resource, unit__archived_at=None)
    return q.guarantee - sum(k.guarantee for k in kids)


@pytest.mark.parametrize("width", [1440, 390])
def test_the_lead_edits_a_project_from_the_team_page_and_asks_above_the_envelope(browser, site, width):  # noqa: F811
    lead = Session(browser, site, "lead-nlp", width=width)
    nlp, project = gpu("acme/research/nlp"), gpu("acme/research/nlp/llm-pretrain")
    page = lead.open(f"/units/{nlp.unit_id}/")
    assert no_sideways_scroll(page)
    lead.shot(f"lead-unit-{width}")  # the lead's guide's first picture: their own view, not an admin's
    clicks = 0
    page.locator("#inside-quotas").get_by_role("link", name="Edit llm-pretrain").click()  # 1
    clicks += 1
    box = page.locator(f"#guarantee-{project.flavor_id}-gpu")
    box.fill(str(project.guarantee - 2))
    page.get_by_label("Why").fill("fewer runs this month")
    page.get_by_role("button", name="Save").click()  # 2
    clicks += 1
    page.get_by_text("Saved 1 quota change").wait_for()
    assert clicks <= 3 and gpu(project.unit.path).guarantee == project.guarantee - 2
    lead.shot(f"lead-door-saved-{width}")

    more = room(nlp.unit.path) + 3  # three past what nlp has left
    page = lead.open(f"/units/{project.unit_id}/quotas/")
    page.locator(f"#guarantee-{project.flavor_id}-gpu").fill(str(project.guarantee - 2 + more))
    page.get_by_label("Why").fill("the December run")
    send = page.get_by_role("button", name="Send as a change request")
    expect(send).to_be_visible()  # offered while typing, on the same form
    assert no_sideways_scroll(page)
    lead.shot(f"lead-door-offer-{width}")
    send.click()
    page.wait_for_url(lambda url: "/requests/" in url)
    request = ChangeRequest.objects.get()
    assert len(request.changes) == 2 and request.unit.path == "acme/research/nlp"
    lead.close()

    head = Session(browser, site, "head-research", width=width)
    page = head.open("/")
    expect(page.locator("#waiting-badge")).to_have_text("1 waiting for your decision")
    head.shot(f"approver-badge-{width}")
    if width < 640:  # on a phone the navigation is behind Menu, which carries the count too
        expect(page.get_by_role("button", name="Menu")).to_contain_text("1")
        page.get_by_role("button", name="Menu").click()
    page.get_by_role("link", name="Change requests").click()
    page.locator(f"a[href='/requests/{request.pk}/']").first.click()
    # decided with the facts in view: holdings and room, usage, the exact change on each cluster
    for part in ("#standing", "#request-usage", "#cluster-diff"):
        expect(page.locator(part)).to_be_visible()
    expect(page.locator("#standing")).to_contain_text("acme/research/nlp/llm-pretrain")
    expect(page.locator("#cluster-diff + .card")).to_contain_text("On k8s-west:")
    assert no_sideways_scroll(page)
    head.shot(f"approver-decides-{width}")
    page.get_by_role("button", name="Approve and apply").click()
    page.get_by_text("Approved and applied").first.wait_for()
    assert gpu(project.unit.path).guarantee == project.guarantee - 2 + more
    expect(page.locator("#waiting-badge")).to_have_count(0)
    head.close()
