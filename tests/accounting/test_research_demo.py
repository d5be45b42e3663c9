"""The demo's first users meet real data (issue #42): with the research department's recent month loaded,
lead-nlp's what-if replays something, head-research's review of last month has units and a plan, nlp's
budget has a burn-down, a request from lead-nlp waits for head-research beside the usage it is about,
and the detectors find the research units' findings."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from accounting.demo_research import ASKED, PROFILE, load_research_demo, research_window
from accounting.models import Finding, SourceRun, UsageHour
from accounting.services.budgets import budgets_evaluate
from accounting.services.findings import findings_detect
from accounting.services.review_tables import review_data
from quotas.access import waiting_for
from quotas.models import OrgUnit
from tests.portal.test_approvers import signed_in
from tests.portal.test_browser import gpu

pytestmark = pytest.mark.django_db


@pytest.fixture
def research(demo):
    assert load_research_demo() is True
    assert load_research_demo() is False  # once
    return OrgUnit.objects.get(path="acme/research")


def test_every_research_unit_that_runs_work_has_every_hour_of_the_window(research):
    start, end = research_window()
    hours = int((end - start).total_seconds() // 3600)
    assert start.day == 1 and start < end - timedelta(days=28)
    rows = UsageHour.objects.filter(unit__path__startswith="acme/research/", hour__gte=start, hour__lt=end)
    assert rows.count() == hours * len(PROFILE)
    assert "synthetic" in SourceRun.objects.get(name__startswith="research-demo").name
    sources = signed_in("lead-nlp").get("/usage/sources/")
    assert sources.status_code == 200 and "research-demo (synthetic)" in sources.content.decode()  # the page says so
    for row in rows.filter(unit__path="acme/research/nlp/llm-pretrain").order_by("-allocated")[:1]:
        assert row.borrowed > 0 and row.pending > 0 and row.allocated == row.within + row.borrowed


def test_head_researchs_review_of_last_month_has_its_units_and_a_plan(research):
    start, _ = research_window()
    data = review_data(research, start.strftime("%Y-%m"))
    units = {row["unit_path"] for row in data.tables["units"]}
    assert {f"acme/research/{p}" for p in PROFILE} <= units
    assert data.summary["verdicts"], data.summary  # the plan has something to say for every unit


def test_lead_nlps_what_if_replays_the_month(research):
    nlp = gpu("acme/research/nlp/llm-pretrain")
    page = signed_in("lead-nlp").post(
        f"/units/{nlp.unit_id}/what-if/",
        {f"guarantee-{nlp.flavor_id}-gpu": str(nlp.guarantee + 8), "scope": "unit"},
    )
    html = page.content.decode()
    assert page.status_code == 200 and "nothing to replay" not in html, html[:2000]


def test_nlps_budget_has_a_burn_down_and_the_request_waits_for_the_head_with_its_usage(research):
    budgets_evaluate()
    nlp = gpu("acme/research/nlp")
    unit_page = signed_in("lead-nlp").get(f"/units/{nlp.unit_id}/").content.decode()
    assert "has spent" in unit_page and "<svg" in unit_page.split("has spent", 1)[1][:20_000]
    [waiting] = waiting_for(User.objects.get(username="head-research"))
    assert waiting.requested_by.username == "lead-nlp" and waiting.changes[0]["guarantee"] == nlp.guarantee + ASKED
    html = signed_in("head-research").get(f"/requests/{waiting.pk}/").content.decode()
    usage = html.split('id="request-usage"', 1)[1].split("</table>", 1)[0]
    assert "acme/research/nlp" in usage and "h with telemetry" in usage


def test_the_detectors_find_the_research_units_findings(research):
    findings_detect(now=timezone.now())
    found = set(Finding.objects.filter(unit__path__startswith="acme/research/").values_list("kind", "unit__path"))
    assert ("idle_guarantee", "acme/research/vision/detection") in found, found
    assert ("demand_above_guarantee", "acme/research/nlp/llm-pretrain") in found, found


def test_the_run_commands_demo_keeps_every_month_s_findings_and_names_every_login(db, capsys):
    from django.core.management import call_command

    from accounting.models import Review

    call_command("allot_demo")
    call_command("allot_usage_demo", review="now")
    out = capsys.readouterr().out
    logins = out.rsplit("Demo logins", 1)[1].split("\n", 1)[0]
    for name in (
        "admin",
        "viewer",
        "lead-nlp",
        "head-research",
        "head-earth",
        "lead-vc6ye",
        "head-fleet-lab",
        "lead-inference",
    ):
        assert name in logins, logins
    live = Finding.objects.filter(state__in=["open", "acknowledged"])
    # today's (research), October 2026's (the fleet lab) and May 2020's (Earth): no detection resolved another's
    for path in ("acme/research/", "acme/fleet-lab/", "acme/earth/"):
        assert live.filter(unit__path__startswith=path).exists(), path
    start, _ = research_window()
    review = Review.objects.get(unit__path="acme/research", month=start.strftime("%Y-%m"))
    assert review.summary["units"] >= len(PROFILE), review.summary


def test_under_the_leads_rule_usage_is_read_like_costs(research, settings):
    """The figures behind findings and plans follow their rule: a lead reads their subtree's usage (API and
    the unit page), not a sibling's; everyone reads it under the default."""
    from rest_framework.test import APIClient

    def units(username):
        client = APIClient()
        client.force_authenticate(User.objects.get(username=username))
        rows = client.get("/api/v1/usage/", {"group_by": "unit"}).json()
        return {r["unit_path"] for r in rows}

    vision = OrgUnit.objects.get(path="acme/research/vision")
    assert "acme/research/nlp/llm-pretrain" in units("lead-vision")
    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    seen = units("lead-vision")
    assert seen and all(p.startswith("acme/research/vision") for p in seen), seen
    assert "acme/research/nlp/llm-pretrain" in units("head-research") and units("admin") >= seen
    nlp_page = signed_in("lead-vision").get(f"/units/{gpu('acme/research/nlp').unit_id}/").content.decode()
    assert 'id="usage-hidden"' in nlp_page and "Use over time" not in nlp_page
    assert "Use over time" in signed_in("lead-vision").get(f"/units/{vision.pk}/").content.decode()
    # every unit's usage at once (Prometheus): a platform admin or the scraper's token, not a lead
    assert signed_in("lead-vision").get("/metrics/usage").status_code == 403
    assert signed_in("admin").get("/metrics/usage").status_code == 200
