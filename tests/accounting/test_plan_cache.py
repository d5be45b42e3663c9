"""The governance plan's cache (issue #43 item 6): a detection plans once per organisation however many
findings it has, the cache key reads no usage rows, and any write of usage makes the next plan a new
one (never a stale one) — on the cache every process shares."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.services import plan as plan_module
from accounting.services.findings import findings_detect
from accounting.services.usage_version import usage_version
from quotas.selectors import org_snapshot
from tests.accounting.test_findings import DAY, TH, a_day

pytestmark = pytest.mark.django_db


def usage_queries(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "accounting_usage" in q["sql"]]


def test_a_detection_plans_once_per_organisation(org, monkeypatch):
    a_day(org)
    calls = []
    real = plan_module.plan_for

    def counted(path, *rest):
        calls.append(path)
        return real(path, *rest)

    monkeypatch.setattr(plan_module, "plan_for", counted)
    run = findings_detect(end=DAY + timedelta(days=1), th=TH)
    quota_findings = run.found["idle_guarantee"] + run.found["demand_above_guarantee"]
    assert quota_findings == 2 and calls == ["acme"]  # two findings, one organisation: one plan


def test_the_cache_key_reads_no_usage_and_a_cached_plan_none(org):
    a_day(org)
    start, end = DAY, DAY + timedelta(days=1)
    snapshot = org_snapshot()
    with CaptureQueriesContext(connection) as key:
        first = plan_module._cache_key(snapshot, "acme", start, end)
    assert usage_queries(key) == [] and first == plan_module._cache_key(snapshot, "acme", start, end)
    computed = plan_module.plan_for("acme", start, end, "day")
    with CaptureQueriesContext(connection) as cached:
        again = plan_module.plan_for("acme", start, end, "day")
    assert usage_queries(cached) == [] and again.totals() == computed.totals()


def test_writing_usage_makes_the_next_plan_a_new_one(org):
    a_day(org)
    start, end = DAY, DAY + timedelta(days=2)
    before_version = usage_version()
    before = plan_module.plan_for("acme", start, end, "two days")
    a_day(org, DAY + timedelta(days=1))  # a replay and a rollup of the second day
    assert usage_version() != before_version
    with CaptureQueriesContext(connection) as recomputed:
        after = plan_module.plan_for("acme", start, end, "two days")
    assert usage_queries(recomputed)  # read the usage again, not the cached plan
    held = {k: round(v, 3) for k, v in before.observed.items()}
    assert {k: round(v / 2, 3) for k, v in after.observed.items()} == held  # the same day twice: twice the hours
