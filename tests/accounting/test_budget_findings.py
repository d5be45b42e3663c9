"""Warnings before a budget bites: findings at the warn threshold, at a forecast exhaustion before the
period ends and when spent; mailed once to the unit's leads; one click asks for a raise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail

from accounting.models import Finding, UsageHour
from accounting.policy.budget_findings import BudgetState, budget_findings, needed, ordinal
from accounting.policy.findings import FindingKind
from accounting.services.budgets import budget_findings_detect, budgets_evaluate
from accounting.services.finding_actions import finding_request_change
from accounting.services.findings import findings_detect
from quotas import services
from quotas.models import Budget, ChangeRequest
from quotas.policy import budgets as bud
from quotas.services import BudgetChange

NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)


def state(device_hours: int, spent: float, rate: float, warn: int = 80) -> BudgetState:
    budget = bud.Budget(7, "west/a100", device_hours, warn_percent=warn, action=bud.BudgetAction.HOLD, tiers=("P2",))
    status = bud.budget_status(budget, allowance=device_hours, spent=spent, rate_per_day=rate, now=NOW)
    return BudgetState(3, 5, "acme/research/vision", 9, budget, status)


def test_a_forecast_before_the_period_ends_says_the_day_and_suggests_what_would_last():
    s = state(3000, 1000, 200)  # 2,000 left at 200 a day: 20 Nov 12:00, before 1 Dec
    (found,) = budget_findings([s], NOW)
    assert found.kind is FindingKind.BUDGET_FORECAST and found.key == "budget_forecast:3:2026-11-01"
    assert found.summary.startswith("At this rate vision spends its west/a100 budget on the 20th")
    # to last: 1,000 spent + 200 × 20.5 days = 5,100
    assert needed(s, NOW) == 5100 and found.action == {"kind": "budget", "unit": 5, "flavor": 9, "device_hours": 5100}
    assert "once it is spent, new P2 work is held" in found.suggestion


def test_past_the_warn_threshold_both_warn_and_forecast_and_spent_alone():
    kinds = {f.kind for f in budget_findings([state(1000, 850, 100)], NOW)}
    assert kinds == {FindingKind.BUDGET_WARN, FindingKind.BUDGET_FORECAST}
    assert {f.kind for f in budget_findings([state(1000, 850, 1)], NOW)} == {FindingKind.BUDGET_WARN}
    (spent,) = budget_findings([state(1000, 1000, 100)], NOW)
    assert spent.kind is FindingKind.BUDGET_SPENT and "hold until 01 Dec" in spent.summary
    assert budget_findings([state(10000, 100, 10)], NOW) == []  # on track: nothing


@pytest.mark.parametrize(
    ("day", "said"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (11, "11th"), (19, "19th"), (22, "22nd")]
)
def test_ordinals(day, said):
    assert ordinal(day) == said


@pytest.mark.django_db
def test_findings_open_once_mail_the_lead_and_one_click_asks_for_the_raise(org, django_capture_on_commit_callbacks):
    for name, priority in (("P0", 100000), ("P1", 1000), ("P2", 100)):
        services.tier_set(actor=org.admin, reason="t", name=name, display_name=name, priority=priority)
    lead = User.objects.create_user("lead-vision", email="vision@example.org")
    org.vision.leads.add(lead)
    services.budget_set(
        actor=org.admin, reason="t", change=BudgetChange(org.vision.pk, org.flavor.pk, device_hours=3000)
    )
    start = datetime(2026, 11, 1, tzinfo=UTC)
    hours = int((NOW - start).total_seconds() // 3600)
    UsageHour.objects.bulk_create(
        UsageHour(
            unit=org.vision, flavor=org.flavor, hour=start + timedelta(hours=h), minutes=60, allocated=10, within=10
        )
        for h in range(hours)
    )  # 240 a day: 2,280 spent by the 10th, noon
    budgets_evaluate(now=NOW)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        first = budget_findings_detect(now=NOW)
    assert first["opened"] == 1
    finding = Finding.objects.get()
    assert finding.kind == "budget_forecast" and "on the 13th" in finding.summary
    (message,) = mail.outbox
    assert message.to == ["vision@example.org"] and "Spent: 2280.0 of 3000.0 device-hours" in message.body
    again = budget_findings_detect(now=NOW + timedelta(hours=1))
    assert again["opened"] == 0 and again["updated"] == 1 and Finding.objects.count() == 1
    findings_detect(now=NOW + timedelta(hours=1))  # the daily detectors leave budget findings alone
    finding.refresh_from_db()
    assert finding.state == "open"
    request = finding_request_change(actor=lead, finding=finding)
    (item,) = request.changes
    assert finding.action is not None
    raise_to = finding.action["device_hours"]
    assert item["kind"] == "budget" and item["device_hours"] == raise_to > 3000
    services.change_request_approve(actor=org.admin, request=request)
    request.refresh_from_db()
    assert request.status == "applied"
    assert Budget.objects.get(unit=org.vision).device_hours == raise_to
    assert ChangeRequest.objects.count() == 1


@pytest.mark.django_db
def test_a_lead_told_of_many_new_findings_at_once_gets_one_list(org, django_capture_on_commit_callbacks):
    from accounting.policy.findings import Found
    from accounting.services.finding_records import findings_reconcile

    org.research.leads.add(User.objects.create_user("head", email="head@example.org"))
    org.ops.leads.add(User.objects.create_user("ops", email="ops@example.org"))
    units = [org.nlp, org.vision, org.llm, org.research, org.nlp, org.vision, org.ops]

    def found(n, unit):
        return Found(
            FindingKind.BUDGET_WARN, f"budget_warn:{n}:2026-11-01", unit.pk, org.flavor.pk, NOW, NOW,
            f"{unit.slug} has spent 85 % of its budget", {}, None, "raise it",
        )  # fmt: skip

    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        run = findings_reconcile([found(n, u) for n, u in enumerate(units)], NOW, NOW, frozenset(FindingKind))
    assert run.opened == 7 and Finding.objects.count() == 7
    by_person = {tuple(m.to): m for m in mail.outbox}
    assert set(by_person) == {("head@example.org",), ("ops@example.org",)}  # nlp, vision, llm are research's
    digest = by_person[("head@example.org",)]
    assert digest.subject == "[Allot] 6 new findings on units you lead" and digest.body.count("  - acme/") == 6
    assert by_person[("ops@example.org",)].subject.startswith("[Allot] budget warn: ops has spent 85 %")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_evaluations_at_once_keep_one_live_finding_per_key(org, monkeypatch):
    """Issue #41: two budget evaluations at once (two rollups' follow-ups) both saw no live finding, both
    inserted one and the second died on finding_one_live_per_key. The first is held just before it commits;
    the second must wait for it and then widen its finding instead of inserting another."""
    import threading

    from django.db import connection

    from accounting.policy.findings import BUDGET_KINDS, Found
    from accounting.services import finding_records

    found = [Found(FindingKind.BUDGET_WARN, "budget_warn:1:2026-11-01", org.nlp.pk, org.flavor.pk, NOW, NOW,
                   "nlp has spent 85 % of its budget", {}, None, "raise it")]  # fmt: skip
    holding, release = threading.Event(), threading.Event()
    mail_opened = finding_records._mail_opened

    def held(opened, paths):  # the first evaluation's last step, inside its transaction
        if threading.current_thread().name == "first":
            holding.set()
            release.wait(30)
        return mail_opened(opened, paths)

    monkeypatch.setattr(finding_records, "_mail_opened", held)
    outcomes: dict[str, Any] = {}

    def evaluate():
        try:
            outcomes[threading.current_thread().name] = finding_records.findings_reconcile(
                found, NOW, NOW, BUDGET_KINDS
            )
        except Exception as exc:  # what the second evaluation raised before
            outcomes[threading.current_thread().name] = exc
        finally:
            connection.close()

    first = threading.Thread(target=evaluate, name="first")
    first.start()
    assert holding.wait(30)
    second = threading.Thread(target=evaluate, name="second")
    second.start()
    second.join(2)  # it waits for the first (or, before, for the first's row in the unique index)
    release.set()
    first.join(30)
    second.join(30)
    assert not isinstance(outcomes["second"], Exception), outcomes["second"]
    assert (outcomes["first"].opened, outcomes["second"].opened, outcomes["second"].updated) == (1, 0, 1)
    live = Finding.objects.filter(key="budget_warn:1:2026-11-01", state="open")
    assert live.count() == 1 and live.get().detections == 2
