"""Budgets in the portal: the unit page's burn-down, the budget form inside the envelope, a change
request above it, and bad input refused beside the field with what was typed kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from accounting.models import UsageHour
from accounting.services.budgets import budgets_evaluate
from quotas import services
from quotas.models import AuditEvent, Budget, ChangeRequest, OrgUnit, ResourceFlavor
from quotas.services import BudgetChange

pytestmark = pytest.mark.django_db


def signed_in(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def unit(path: str) -> OrgUnit:
    return OrgUnit.objects.get(path=path, archived_at__isnull=True)


def flavor(name: str = "a100-80gb") -> ResourceFlavor:
    return ResourceFlavor.objects.get(name=name)


def form(client: Client, u: OrgUnit) -> dict[str, object]:
    """The budget form's values as the browser posts them."""
    page = client.get(f"/units/{u.pk}/budgets/")
    assert page.status_code == 200
    data: dict[str, object] = {}
    for row in page.context["rows"]:
        p = row.prefix
        data[f"{p}-version"] = row.values["version"]
        for f in row.fields:
            data[f"{p}-{f['name']}"] = f["value"]
        data[f"{p}-period"], data[f"{p}-action"] = row.values["period"], row.values["action"]
        data[f"{p}-tiers"] = list(row.values["tiers"])
    return data


def test_a_head_sets_a_teams_budget_directly_and_it_is_audited(demo):
    head, team, a100 = signed_in("head-research"), unit("acme/research/nlp"), flavor()
    p = f"b{a100.pk}"
    data = {**form(head, team), f"{p}-device_hours": "20,000", f"{p}-action": "hold", "reason": "december plan"}
    response = head.post(f"/units/{team.pk}/budgets/", data)
    assert response.status_code == 302 and response["Location"] == f"/units/{team.pk}/"
    budget = Budget.objects.get(unit=team, flavor=a100)
    assert (budget.device_hours, budget.action, budget.tiers) == (20000, "hold", ["P1", "P2", "P3"])
    event = AuditEvent.objects.get(action="budget_set")
    assert event.reason == "december plan" and event.actor_name == "head-research"
    page = head.get(f"/units/{team.pk}/").content.decode()
    assert 'id="budgets"' in page and "of 20,000 device-hours" in page and "not measured yet" in page


def test_bad_input_is_refused_beside_the_flavors_field_and_what_was_typed_stays(demo):
    head, team, a100 = signed_in("head-research"), unit("acme/research/nlp"), flavor()
    p = f"b{a100.pk}"
    data = {**form(head, team), f"{p}-device_hours": "-40", f"{p}-warn_percent": "80", "reason": "plan"}
    response = head.post(f"/units/{team.pk}/budgets/", data)
    assert response.status_code == 400 and not Budget.objects.exists()
    (row,) = [r for r in response.context["rows"] if r.flavor == a100]
    assert "outside 0" in row.errors["device_hours"] and row.values["device_hours"] == "-40"
    html = response.content.decode()
    assert f'id="err-{p}-device_hours">device-hours' not in html  # the message, not the field name, is shown
    assert 'aria-invalid="true"' in html and 'value="-40"' in html


def test_every_bad_field_of_a_flavor_is_named_at_once_with_its_fix(demo):
    """Issue #42: the form named only the first bad field per flavor: three rounds for three mistakes."""
    head, team, a100 = signed_in("head-research"), unit("acme/research/nlp"), flavor()
    p = f"b{a100.pk}"
    data = {
        **form(head, team),
        f"{p}-device_hours": "-40",
        f"{p}-warn_percent": "150",
        f"{p}-oversubscription": "lots",
        "reason": "plan",
    }
    response = head.post(f"/units/{team.pk}/budgets/", data)
    assert response.status_code == 400 and not Budget.objects.exists()
    (row,) = [r for r in response.context["rows"] if r.flavor == a100]
    assert set(row.errors) == {"device_hours", "warn_percent", "oversubscription"}
    assert "from 1 to 100" in row.errors["warn_percent"] and "such as 1 or 1.25" in row.errors["oversubscription"]
    html = response.content.decode()
    assert "Not saved: 3 fields to fix." in html
    for name in ("device_hours", "warn_percent", "oversubscription"):
        assert f'href="#{p}-{name}"' in html  # each linked from the summary on top


def test_children_above_the_parents_budget_are_refused_with_the_figures(demo):
    head, a100 = signed_in("head-research"), flavor()
    admin = User.objects.get(username="admin")
    services.budget_set(
        actor=admin, reason="t", change=BudgetChange(unit("acme/research").pk, a100.pk, device_hours=10000)
    )
    team = unit("acme/research/nlp")
    p = f"b{a100.pk}"
    response = head.post(
        f"/units/{team.pk}/budgets/", {**form(head, team), f"{p}-device_hours": "12000", "reason": "more"}
    )
    assert response.status_code == 400 and not Budget.objects.filter(unit=team).exists()
    said = " ".join(v.message for v in response.context["violations"])
    assert "12,000" in said and "10,000" in said


def test_a_lead_asks_for_their_own_budget_and_the_head_approves_it(demo):
    lead, team, a100 = signed_in("lead-nlp"), unit("acme/research/nlp"), flavor()
    admin = User.objects.get(username="admin")
    services.budget_set(actor=admin, reason="t", change=BudgetChange(team.pk, a100.pk, device_hours=9000))
    p = f"b{a100.pk}"
    data = {**form(lead, team), f"{p}-device_hours": "12000", "reason": "the december run needs more"}
    response = lead.post(f"/units/{team.pk}/budgets/", data)
    request = ChangeRequest.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/requests/{request.pk}/"
    assert Budget.objects.get(unit=team).device_hours == 9000  # not yet
    (item,) = request.changes
    assert item["kind"] == "budget" and item["device_hours"] == 12000 and item["version"] == 1
    head = signed_in("head-research")
    page = head.get(f"/requests/{request.pk}/").content.decode()
    assert "GPU-hour budget" in page and "9,000 → 12,000" in page
    head.post(f"/requests/{request.pk}/", {"decision": "approve", "comment": "ok"})
    request.refresh_from_db()
    assert request.status == "applied" and Budget.objects.get(unit=team).device_hours == 12000
    assert AuditEvent.objects.filter(action="budget_set", reason__startswith=f"change request #{request.pk}").exists()


def test_a_budget_request_made_stale_by_an_edit_is_refused_and_changes_nothing(demo):
    team, a100 = unit("acme/research/nlp"), flavor()
    admin, lead = User.objects.get(username="admin"), User.objects.get(username="lead-nlp")
    services.budget_set(actor=admin, reason="t", change=BudgetChange(team.pk, a100.pk, device_hours=9000))
    request = services.change_request_submit(
        actor=lead, reason="more", changes=[BudgetChange(team.pk, a100.pk, device_hours=12000)]
    )
    services.budget_set(actor=admin, reason="cut", change=BudgetChange(team.pk, a100.pk, device_hours=8000))
    services.change_request_approve(actor=User.objects.get(username="head-research"), request=request)
    request.refresh_from_db()
    assert request.status == "stale" and "changed since version 1" in request.outcome["detail"]
    assert Budget.objects.get(unit=team).device_hours == 8000


def test_the_unit_page_draws_the_burn_down_and_says_when_it_runs_out(demo):
    team, a100 = unit("acme/research/vision"), flavor()
    admin = User.objects.get(username="admin")
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    services.budget_set(actor=admin, reason="t", change=BudgetChange(team.pk, a100.pk, device_hours=100000))
    hours = int((now - start).total_seconds() // 3600)
    UsageHour.objects.filter(unit=team, flavor=a100).delete()
    UsageHour.objects.bulk_create(
        UsageHour(unit=team, flavor=a100, hour=start + timedelta(hours=h), minutes=60, allocated=40, within=40)
        for h in range(hours)
    )
    budgets_evaluate(now=now)
    page = signed_in("viewer").get(f"/units/{team.pk}/")
    (panel,) = page.context["budgets"]
    status = panel["view"].status
    assert round(status.spent) == 40 * hours
    html = page.content.decode()
    assert 'class="actual"' in html and 'class="plan"' in html and "left: " in html
    if status.exhausts_at is not None:  # 960 device-hours a day: 100,000 lasts ~104 days
        assert "forecast: out" in html
    else:
        assert "forecast: " in html and " h at end" in html
    assert "plan: 0 at period end" in html


def test_the_burn_down_chart_puts_the_forecast_exhaustion_on_the_day_the_status_says():
    from datetime import date

    from accounting.charts import burn_down_chart
    from quotas.policy import budgets as bud

    now = datetime(2026, 11, 10, 12, tzinfo=UTC)
    budget = bud.Budget(1, "west/a100", 3000)
    daily = {date(2026, 11, d): 200.0 for d in range(1, 11)}
    lines = bud.burn_down(budget, allowance=3000, spent=1900, daily=daily, rate_per_day=200, now=now)
    status = bud.budget_status(budget, allowance=3000, spent=1900, rate_per_day=200, now=now)
    chart = burn_down_chart(lines, now=now)
    assert chart is not None and status.exhausts_at is not None
    texts = [label[2] for label in chart.labels]
    assert "left: 1,100 h" in texts and "forecast: out 16 Nov" in texts  # 1,100 at 200 a day from the 10th, noon
    assert f"{status.exhausts_at:%d %b}" == "16 Nov"  # the day the sentence and the findings say
    assert chart.today_x is not None and chart.left < chart.today_x < chart.width


def test_showback_carries_each_units_budget_spent_left_and_when_it_runs_out(demo):
    team, a100 = unit("acme/research/vision"), flavor()
    admin = User.objects.get(username="admin")
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    services.budget_set(actor=admin, reason="t", change=BudgetChange(team.pk, a100.pk, device_hours=100))
    UsageHour.objects.filter(unit=team, flavor=a100).delete()
    UsageHour.objects.create(unit=team, flavor=a100, hour=start, minutes=60, allocated=60, within=40, borrowed=20)
    client = signed_in("admin")
    report = client.get("/api/v1/showback/", {"month": f"{start:%Y-%m}", "within": "acme/research"}).json()
    line = next(x for x in report["lines"] if x["unit_path"] == team.path and x["flavor_key"] == a100.key)
    # 40 inside the guarantee and 20 borrowed at half: 50 of 100
    assert (line["budget_h"], line["budget_spent_h"], line["budget_remaining_h"]) == (100, 50, 50)
    assert line["budget_ran_out_on"] is None and report["has_budgets"] is True
    others = [x for x in report["lines"] if x["unit_path"] != team.path]
    assert others and all(x["budget_h"] is None for x in others)
    page = client.get("/showback/", {"month": f"{start:%Y-%m}", "within": "acme/research"}).content.decode()
    assert "100 h: 50 spent, 50 left" in page


@pytest.mark.parametrize("version", ["", "abc", "²", "٤٧"])
def test_a_budget_form_without_a_valid_version_saves_nothing_and_says_why_on_top(demo, version):
    """Issue #42: the form skipped the optimistic lock when the version was missing or not a number."""
    head, team, a100 = signed_in("head-research"), unit("acme/research/nlp"), flavor()
    p = f"b{a100.pk}"
    data = {**form(head, team), f"{p}-device_hours": "20000", f"{p}-version": version, "reason": "plan"}
    response = head.post(f"/units/{team.pk}/budgets/", data)
    assert response.status_code == 400 and not Budget.objects.exists()
    html = response.content.decode()
    assert 'id="errors"' in html and "Not saved: 1 field to fix." in html
    assert f'href="#{p}-version-error"' in html and "reload the page" in html


def test_a_stale_removal_keeps_the_budget_someone_changed_meanwhile(demo):
    head, team, a100 = signed_in("head-research"), unit("acme/research/nlp"), flavor()
    p = f"b{a100.pk}"
    head.post(f"/units/{team.pk}/budgets/", {**form(head, team), f"{p}-device_hours": "20000", "reason": "first"})
    seen = form(head, team)  # version 1 on this page
    other = signed_in("admin")
    other.post(f"/units/{team.pk}/budgets/", {**form(other, team), f"{p}-device_hours": "30000", "reason": "raise"})
    response = head.post(f"/units/{team.pk}/budgets/", {**seen, f"{p}-remove": "1", "reason": "not needed"})
    assert response.status_code == 409 and "Nothing was saved" in response.content.decode()
    assert Budget.objects.get(unit=team, flavor=a100).device_hours == 30000
