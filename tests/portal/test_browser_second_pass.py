"""Issue #13 in a real browser (Chromium, headless), at a desktop width and a phone's: the quota form
(GPUs first, CPU and memory folded, the violation at its field, the preview in words, a save typed
fast sends one POST and no late check), the rebalance form, a change request's page, and a request
across two departments that one department's head cannot decide. Screenshots of each at both widths
go to artifacts/screenshots/."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from quotas import services
from quotas.models import AuditEvent, OrgUnit
from quotas.policy import Resource
from tests.portal.test_browser import Session, browser, gpu, site  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WIDTHS = [1440, 390]


def no_sideways_scroll(page):
    """True when the page is no wider than the window; otherwise fails naming what overflows."""
    if page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"):
        return True
    wide = page.evaluate(
        """() => [...document.querySelectorAll('body *')]
          .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible')
          .map(e => `${e.tagName}#${e.id}: ${e.scrollWidth}px in ${e.clientWidth}px`).slice(0, 8)"""
    )
    raise AssertionError(f"{page.url} scrolls sideways: {wide}")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_quota_form_at_both_widths(browser, site, width):  # noqa: F811
    lead = Session(browser, site, "lead-nlp", width=width)
    project = gpu("acme/research/nlp/llm-pretrain")
    page = lead.open(f"/units/{project.unit_id}/quotas/")
    assert no_sideways_scroll(page), "the form scrolls sideways"
    first = page.locator("fieldset.flavor").first
    assert first.locator(".quota-what").first.inner_text() == "GPUs"  # GPUs first
    assert not first.locator("details").first.evaluate("d => d.open")  # CPU and memory folded
    lendable = page.locator(f"#lendable-{project.flavor_id}-gpu")
    lendable.fill("999")  # above its own guarantee: a violation about this very field
    message = page.locator(f"#err-lendable-{project.flavor_id}-gpu")
    expect(message).to_have_text(re.compile(r"\S"))
    expect(lendable).to_have_class(re.compile("invalid"))
    assert lendable.get_attribute("aria-invalid") == "true"
    lead.shot(f"edit-violation-at-field-{width}")
    lendable.fill(str(project.lendable))
    expect(message).to_have_text("")
    expect(lendable).not_to_have_class(re.compile("invalid"))

    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.get_by_label("Why").fill("fast save")
    page.locator(f"#guarantee-{project.flavor_id}-gpu").fill("44")
    page.get_by_role("button", name="Save").click()  # within the 300 ms before the check would fire
    page.get_by_text("Saved 1 quota change").wait_for()
    page.wait_for_timeout(600)  # long enough for a delayed check to have been sent, had it not been cancelled
    edits = [u for u in posts if u.endswith(f"/units/{project.unit_id}/quotas/")]
    checks = [u for u in posts if u.endswith("/quotas/check/")]
    assert (len(edits), len(checks)) == (1, 0), posts
    assert gpu(project.unit.path).guarantee == 44 and AuditEvent.objects.filter(reason="fast save").count() == 1
    lead.shot(f"edit-saved-{width}")
    lead.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_rebalance_and_change_requests_at_both_widths(browser, site, width):  # noqa: F811
    head = Session(browser, site, "head-research", width=width)
    research = OrgUnit.objects.get(path="acme/research")
    rl, vision = gpu("acme/research/rl"), gpu("acme/research/vision")
    page = head.open(f"/units/{research.pk}/rebalance/?flavor={rl.flavor_id}&resource=gpu")
    assert no_sideways_scroll(page)
    page.locator(f"#guarantee-{rl.unit_id}").fill(str(rl.guarantee - 4))
    page.locator(f"#guarantee-{vision.unit_id}").fill(str(vision.guarantee + 4))
    page.get_by_text("left to give").wait_for()
    head.shot(f"rebalance-{width}")
    page.get_by_label("Why").fill("vision's detector")
    page.get_by_role("button", name="Save all").click()
    page.get_by_text("Rebalanced 2 unit(s)").wait_for()
    assert (gpu(rl.unit.path).guarantee, gpu(vision.unit.path).guarantee) == (rl.guarantee - 4, vision.guarantee + 4)

    lead = User.objects.get(username="lead-nlp")
    ranking = OrgUnit.objects.get(path="acme/production/ranking")
    ranking.leads.add(lead)
    nlp, rank = gpu("acme/research/nlp"), gpu("acme/production/ranking")
    across = services.change_request_submit(
        actor=lead,
        reason="one project in both teams",
        changes=[services.QuotaChange(q.unit_id, q.flavor_id, Resource.GPU, q.guarantee + 1) for q in (nlp, rank)],
    )
    production = Session(browser, site, "head-production", width=width)
    page = production.open(f"/requests/{across.pk}/")
    page.get_by_text("only someone above every one of them decides it").wait_for()
    assert page.get_by_role("button", name="Approve and apply").count() == 0  # issue #13.1
    assert no_sideways_scroll(page)
    production.shot(f"request-across-departments-{width}")
    own = services.change_request_submit(
        actor=lead,
        reason="december run",
        changes=[services.QuotaChange(nlp.unit_id, nlp.flavor_id, Resource.GPU, nlp.guarantee + 2)],
    )
    page = head.open(f"/requests/{own.pk}/")
    page.get_by_text(f"guarantee {nlp.guarantee} → {nlp.guarantee + 2}").wait_for()
    page.get_by_text("Not applied yet: if approved now, it would fit the quota policy.").wait_for()
    assert no_sideways_scroll(page)
    head.shot(f"request-{width}")
    head.close()
    production.close()


def _form(page, action):
    return page.locator(f'form:has(input[name="action"][value="{action}"])')


def _submit(page, action, **fields):
    form = _form(page, action)
    for name, value in fields.items():
        box = form.locator(f'[name="{name}"]')
        if box.evaluate("e => e.tagName") == "SELECT":
            box.select_option(label=value)
        else:
            box.fill(value)
    form.get_by_role("button").click()
    page.wait_for_load_state()


def test_a_new_organisation_is_set_up_from_an_empty_database_in_the_portal_alone(browser, live_server):  # noqa: F811
    """Issue #13.9: clusters, flavors, the organisation, its units, leads, members, namespaces, quotas,
    archive and bring back — all in the portal, each audited, no Django shell."""
    User.objects.create_user("root-admin", password="allot-demo", is_staff=True)
    User.objects.create_user("lee", password="allot-demo")
    admin = Session(browser, live_server.url, "root-admin", width=1440)
    page = admin.open("/")
    page.get_by_role("link", name="set one up").click()
    _submit(page, "cluster", name="k8s-east", connection_ref="kubeconfig:/etc/allot/east.yaml", reason="new fleet")
    page.get_by_text("Cluster k8s-east saved.").wait_for()
    _submit(page, "flavor", name="a100", accelerator_model="A100", physical_devices="64", reason="its GPUs")
    page.get_by_text("Flavor k8s-east/a100 saved.").wait_for()
    _submit(page, "flavor", name="a100", accelerator_model="A100", physical_devices="many", reason="r")
    page.get_by_text("'many' is not a number of devices").wait_for()  # a refusal names the field
    _submit(page, "organisation", slug="globex", name="Globex", reason="first organisation")
    page.get_by_text("Organisation globex created.").wait_for()
    admin.shot("setup-1440")

    page = admin.open("/")
    page.get_by_role("link", name="globex").click()
    _submit(page, "create", slug="research", name="Research", reason="a department")
    page.get_by_text("Created globex/research.").wait_for()
    page = admin.open(f"/units/{OrgUnit.objects.get(path='globex/research').pk}/")
    _submit(page, "create", slug="nlp", name="NLP", reason="a team")
    nlp = OrgUnit.objects.get(path="globex/research/nlp")
    page = admin.open(f"/units/{nlp.pk}/")
    _submit(page, "leads", leads="lee", reason="lee leads it")
    _submit(page, "member_add", slurm_username="lee", reason="lee trains")
    _submit(page, "bind", cluster="k8s-east", namespace="nlp-train", reason="their jobs")
    page.get_by_text("Bound k8s-east/nlp-train.").wait_for()
    _submit(page, "rename", name="Language", reason="new name")
    admin.shot("administer-1440")

    for path, guarantee in (("globex", "64"), ("globex/research", "40"), ("globex/research/nlp", "20")):
        unit = OrgUnit.objects.get(path=path)
        page = admin.open(f"/units/{unit.pk}/quotas/")
        page.locator("fieldset.flavor input[id^=guarantee-][id$=-gpu]").first.fill(guarantee)
        page.get_by_label("Why").fill("first quotas")
        page.get_by_role("button", name="Save").click()
        page.get_by_text("Saved 1 quota change").wait_for()

    page = admin.open(f"/units/{nlp.pk}/")
    _submit(page, "archive", reason="team merged")
    page.get_by_text("Archived 1 unit(s).").wait_for()
    _submit(page, "unarchive", reason="back again")
    page.get_by_text("1 unit(s) back.").wait_for()
    admin.close()

    nlp.refresh_from_db()
    assert nlp.archived_at is None and nlp.name == "Language"
    assert [u.username for u in nlp.leads.all()] == ["lee"]
    assert [m.slurm_username for m in nlp.memberships.all()] == ["lee"]
    assert [(b.cluster.name, b.namespace) for b in nlp.namespaces.all()] == []  # released by the archive
    from quotas.models import Quota

    assert Quota.objects.get(unit=nlp, resource="nvidia.com/gpu").guarantee == 20
    done = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"cluster_set", "flavor_set", "org_unit_create", "org_unit_update", "membership_add", "namespace_bind",
            "quota_set", "org_unit_archive", "org_unit_unarchive"} <= done  # fmt: skip
    phone = Session(browser, live_server.url, "root-admin", width=390)
    page = phone.open("/setup/")
    assert no_sideways_scroll(page)
    phone.shot("setup-390")
    page = phone.open(f"/units/{nlp.pk}/")
    assert no_sideways_scroll(page)
    phone.shot("administer-390")
    phone.close()
