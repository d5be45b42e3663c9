"""Outcome fairness on the database: waits and slowdowns per unit and tier, the oldest feasible pending
workload (one that can never run is not it), preemptions suffered and caused, the share of the time a
unit held its guarantee when it wanted it, and why it held less (lent out, or the work did not fit)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounting.models import Allocation, WorkloadRecord
from accounting.policy.fairness import Outcome, slowdown, summarise
from accounting.selectors.fairness import fairness_report
from accounting.selectors.showback import showback_period
from accounting.services import usage_replay_load, usage_rollup
from tests.accounting.test_usage import HEADER

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 2, 9, tzinfo=UTC)


def record(org, unit, sid, *, tier="P2", submitted, admitted=None, held=0, devices=8, state="finished", **kw):
    return WorkloadRecord.objects.create(
        cluster=org.cluster, scheduler_id=sid, job_id=f"{unit.slug}/{sid}", unit=unit, tier=tier, flavor=org.flavor,
        devices=devices, submitted_at=submitted, admitted_at=admitted, held_seconds=held, state=state, **kw,
    )  # fmt: skip


def test_slowdown_and_summaries_are_what_they_say() -> None:
    assert slowdown(0, 100) == 1 and slowdown(300, 100) == 4 and slowdown(10, 0) == 11  # run at least 1 s
    summary = summarise([Outcome(1, "P2", w, 60) for w in (0, 60, 120, 600)])
    assert (summary.workloads, summary.wait_p50_s, summary.wait_p95_s, summary.slowdown_p95) == (4, 60, 600, 11)


def test_the_report_per_unit_and_tier(org, admin_client):
    minute = timedelta(minutes=1)
    for i, wait in enumerate((1, 2, 3, 30)):
        record(
            org, org.nlp, f"n{i}", submitted=T0, admitted=T0 + wait * minute, held=600, tier="P3" if i == 3 else "P2"
        )
    record(org, org.vision, "v0", submitted=T0, admitted=T0, held=600)
    record(org, org.vision, "wait-big", submitted=T0 - 3 * minute, devices=500, state="pending")  # can never run
    record(org, org.vision, "wait-ok", submitted=T0 - 2 * minute, devices=4, state="pending")
    # vision borrowed 8 and was preempted at 09:20; nlp, inside its guarantee, waited from 09:10 to 09:40
    borrower = record(org, org.vision, "b", submitted=T0, admitted=T0, held=1200)
    Allocation.objects.create(record=borrower, unit=org.vision, flavor=org.flavor, devices=8, borrowed=8, start=T0,
                              end=T0 + 20 * minute, raw_state="evicted Preempted")  # fmt: skip
    lender = record(org, org.nlp, "l", submitted=T0 + 10 * minute, admitted=T0 + 40 * minute, held=60)
    Allocation.objects.create(record=lender, unit=org.nlp, flavor=org.flavor, devices=8, borrowed=0,
                              start=T0 + 40 * minute, end=T0 + 41 * minute, submitted_at=T0 + 10 * minute)  # fmt: skip
    rows = [HEADER]
    for i in range(60):  # half the minutes nlp wanted 35 of its 30 and held 20; the other half it held 30
        held, queued = (20, 15) if i < 30 else (30, 5)
        rows.append(f"{(T0 + i * minute):%Y-%m-%dT%H:%M},nlp,a100,30,{held},{queued}")
    usage_replay_load(lines=rows, cluster=org.cluster, units={"nlp": org.nlp}, name="hour")
    usage_rollup(start=T0, end=T0 + timedelta(hours=1))

    report = fairness_report(showback_period("2026-11"), within="acme/research", now=T0 + timedelta(hours=1))
    units = {u["unit_path"]: u for u in report["units"]}
    nlp, vision = units["acme/research/nlp"], units["acme/research/vision"]
    assert nlp["workloads"] == 5 and nlp["wait_p50_s"] == 180 and nlp["wait_p95_s"] == 1800
    assert nlp["tiers"]["P3"] == {"workloads": 1, "wait_p95_s": 1800, "slowdown_p95": 4.0}
    # held all of its guarantee in half the minutes it wanted it; the hour it held less (25 of 30 on
    # average) with work waiting and nothing lent is "did not fit", not a broken promise
    assert nlp["held_guarantee_when_wanted"] == 0.5 and nlp["wanted_guarantee"] == {"count": 60, "unit": "minutes"}
    assert (nlp["did_not_fit_hours"], nlp["waited_while_lent_hours"]) == (1, 0) and report["job_records"]
    assert nlp["preemptions_caused"] == 1 and vision["preemptions_suffered"] == 1
    assert vision["oldest_pending"]["job"] == "vision/wait-ok"  # the 500-GPU one could never run
    assert vision["oldest_pending"]["waiting_s"] == 62 * 60
    api = admin_client.get("/api/v1/fairness/", {"month": "2026-11", "within": "acme/research"})
    assert api.status_code == 200 and {u["unit_path"] for u in api.json()["units"]} == set(units)
    page = admin_client.get("/fairness/", {"month": "2026-11"}).content.decode()
    assert "Under acme/research" in page and "50 %" in page and "vision/wait-ok" in page


def test_a_replayed_month_says_it_has_no_job_records(org, admin_client):
    """Issue #27.8: a minute series has no workloads: the page says so instead of showing 0 as measured."""
    rows = [HEADER] + [f"{(T0 + i * timedelta(minutes=1)):%Y-%m-%dT%H:%M},nlp,a100,30,10,0" for i in range(60)]
    usage_replay_load(lines=rows, cluster=org.cluster, units={"nlp": org.nlp}, name="minutes")
    usage_rollup(start=T0, end=T0 + timedelta(hours=1))
    report = fairness_report(showback_period("2026-11"), within="acme")
    assert report["job_records"] is False
    page = admin_client.get("/fairness/", {"month": "2026-11"}).content.decode()
    assert "not measured" in page and "no records" in page and ">none<" not in page
