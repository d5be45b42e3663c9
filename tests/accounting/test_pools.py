"""The pool table from the rollups: the API, the page and a subtree against its guarantee."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounting.models import UsageHour
from accounting.pools import pool_report
from quotas import services

pytestmark = pytest.mark.django_db
NOV = datetime(2026, 11, 1, tzinfo=UTC)


def rows(unit, flavor, start, hours, allocated, pending=0.0, active=None):
    UsageHour.objects.bulk_create(
        UsageHour(unit=unit, flavor=flavor, hour=start + timedelta(hours=h), minutes=60, allocated=allocated,
                  within=allocated, pending=pending, active=active)
        for h in range(hours)
    )  # fmt: skip


@pytest.fixture
def pools(org):
    v100 = services.flavor_set(
        actor=org.admin, reason="t", cluster=org.cluster, name="v100", accelerator_model="V100",
        device_memory_gb=32, physical_devices=40,
    )  # fmt: skip
    rows(org.nlp, org.flavor, NOV, 24 * 30, allocated=60, pending=12, active=45)  # 60 of 120 held, 75 % active
    rows(org.vision, org.flavor, NOV, 24 * 10, allocated=30)  # no DCGM: not in the active share
    rows(org.nlp, v100, NOV, 24 * 29, allocated=0)  # the v100 pool reported, idle; one day without telemetry
    rows(org.nlp, org.flavor, NOV - timedelta(days=31), 24 * 31, allocated=30)  # October: a quarter
    return org, v100


def test_each_pool_against_its_capacity_beside_the_month_before(pools, client):
    org, _ = pools
    report = pool_report("2026-11")
    a100, small = report["pools"]
    assert (a100["flavor"], small["flavor"]) == ("west/a100", "west/v100")  # largest memory first
    assert a100["capacity_h"] == 120 * 720 and a100["allocated_h"] == 60 * 720 + 30 * 240
    assert a100["allocated_pct"] == round(100 * (60 * 720 + 30 * 240) / (120 * 720), 1)
    assert a100["active_pct"] == 75.0 and a100["pending_h"] == 12 * 720
    assert a100["before"]["allocated_pct"] == 25.0 and a100["allocated_pct_change_pp"] == round(
        a100["allocated_pct"] - 25.0, 1
    )
    assert small["capacity_h"] == 40 * 24 * 29 and small["allocated_pct"] == 0.0  # the missing day is no capacity
    assert report["fleet"]["capacity_h"] == a100["capacity_h"] + small["capacity_h"]
    client.force_login(org.admin)
    answer = client.get("/api/v1/pools/", {"month": "2026-11"}).json()
    assert answer == report | {"within": ""}
    page = client.get("/pools/", {"month": "2026-11"}).content.decode()
    assert "west/v100" in page and "0.0 %" in page and "the fleet" in page


def test_a_subtree_against_its_guarantee_and_bad_input_names_the_field(pools, client):
    org, _ = pools
    report = pool_report("2026-11", "acme/research/nlp")
    (a100, v100) = report["pools"]
    assert a100["capacity_h"] == 30 * 720 and a100["allocated_pct"] == 200.0  # 60 held on a guarantee of 30
    assert v100["capacity_h"] == 0 and v100["allocated_pct"] is None  # no guarantee there: no share to show
    client.force_login(org.admin)
    assert client.get("/api/v1/pools/", {"month": "2026-13"}).json() == {"month": ["'2026-13' is not YYYY-MM"]}
    unknown = client.get("/api/v1/pools/", {"month": "2026-11", "within": "acme/nope"})
    assert unknown.status_code == 400 and "acme/nope" in unknown.json()["within"][0]


def test_a_spike_against_the_same_hours_of_earlier_weeks_opens_a_finding(org, client):
    from accounting.models import Finding
    from accounting.services.findings import findings_detect

    end = datetime(2026, 11, 26, tzinfo=UTC)
    for week in range(1, 5):  # the same Wednesday hours of four earlier weeks: 8 devices
        rows(org.nlp, org.flavor, end - timedelta(weeks=week, hours=24), 24, allocated=8)
    rows(org.nlp, org.flavor, end - timedelta(hours=24), 24, allocated=30)  # today: 30
    rows(org.vision, org.flavor, end - timedelta(hours=24), 24, allocated=30)  # vision has no norm yet
    findings_detect(end=end, now=end)
    finding = Finding.objects.get(kind="consumption_anomaly")
    assert finding.unit == org.nlp and "3.8× its usual west/a100" in finding.summary
    assert finding.evidence["norm_h"] == 192 and finding.evidence["allocated_h"] == 720
    days = [d for d, *_ in finding.evidence["daily"]]
    assert days[0] == "2026-10-28" and days[-1] == "2026-11-25"
    client.force_login(org.admin)
    page = client.get("/findings/").content.decode()
    assert "its norm for these hours" in page and "3.8× its usual" in page
