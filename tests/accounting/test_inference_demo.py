"""The demo's inference team on MIG slices (issue #45.7): a recent month on Kubernetes West's H100 MIG flavor beside
the whole-GPU teams — every hour in GPU-equivalents, the hours what the rollup makes of the team's workload
records, showback charging GPU-equivalent-hours at the flavor's price, and lead-inference's page showing the
slices its guarantee holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from accounting.demo_inference import DEPLOYMENTS, GUARANTEE, load_inference_demo, replicas
from accounting.demo_research import research_window
from accounting.models import Allocation, UsageHour, WorkloadRecord
from accounting.services import usage_rollup
from quotas.models import OrgUnit
from tests.portal.test_approvers import signed_in

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 3, 10, 30, tzinfo=UTC)  # a Thursday
WEIGHT = {"1g.10gb": Fraction(1, 7), "3g.40gb": Fraction(1, 2)}


@pytest.fixture
def inference(demo):
    assert load_inference_demo(NOW) is True
    assert load_inference_demo(NOW) is False  # once
    return OrgUnit.objects.get(path="acme/production/inference")


def test_every_hour_of_the_window_is_in_gpu_equivalents(inference):
    start, end = research_window(NOW)
    rows = {h.hour: h for h in UsageHour.objects.filter(unit=inference)}
    assert len(rows) == (end - start).total_seconds() // 3600 and min(rows) == start
    day, night = datetime(2026, 12, 2, 14, tzinfo=UTC), datetime(2026, 12, 2, 3, tzinfo=UTC)
    assert rows[day].allocated == pytest.approx(14 / 7 + 4 / 2 + 3 / 7)  # a working day: 17 small slices, 4 halves
    assert rows[night].allocated == pytest.approx(10 / 7 + 1)
    assert all(h.allocated <= GUARANTEE and h.borrowed == 0 for h in rows.values())
    assert {h.flavor.name for h in rows.values()} == {"h100-mig"} and rows[day].flavor.sharing == "mig"


def test_the_hours_are_what_the_rollup_makes_of_the_teams_workload_records(inference):
    records = WorkloadRecord.objects.filter(unit=inference)
    assert {(r.devices, r.equivalents) for r in records} == {(1, 1 / 7), (1, 0.5)}  # one slice a replica
    last = research_window(NOW)[1] - timedelta(hours=1)  # the replicas of the last hour are up now
    assert records.filter(ended_at__isnull=True).count() == sum(replicas(d, last) for d in DEPLOYMENTS) == 21
    day = datetime(2026, 11, 28, tzinfo=UTC)  # a Saturday
    written = {
        h.hour: (h.allocated, h.within, h.borrowed)
        for h in UsageHour.objects.filter(unit=inference, hour__gte=day, hour__lt=day + timedelta(days=1))
    }
    usage_rollup(start=day, end=day + timedelta(days=1), now=NOW)  # rebuilt from the allocations
    rebuilt = {
        h.hour: (h.allocated, h.within, h.borrowed)
        for h in UsageHour.objects.filter(unit=inference, hour__gte=day, hour__lt=day + timedelta(days=1))
    }
    assert len(rebuilt) == 24 and rebuilt == {k: pytest.approx(v) for k, v in written.items()}
    expected = sum(
        sum((replicas(d, day + timedelta(hours=h)) * WEIGHT[spec[0]] for d, spec in DEPLOYMENTS.items()), Fraction(0))
        for h in range(24)
    )
    assert sum(v[0] for v in rebuilt.values()) == pytest.approx(float(expected))
    held = sum(
        (a.equivalents or 0) * (min(a.end or NOW, day + timedelta(days=1)) - max(a.start, day)).total_seconds() / 3600
        for a in Allocation.objects.filter(unit=inference, start__lt=day + timedelta(days=1))
        if (a.end or NOW) > day
    )
    assert held == pytest.approx(float(expected))


def test_the_records_api_gives_each_replicas_slice_and_what_it_weighs(inference, admin_client):
    page = admin_client.get("/api/v1/workload-records/", {"within": inference.path, "page_size": 500}).json()
    rows = page["results"] if isinstance(page, dict) else page
    assert rows and {(r["flavor_key"], r["devices"], round(r["equivalents"], 6)) for r in rows} == {
        ("k8s-west/h100-mig", 1, round(1 / 7, 6)),
        ("k8s-west/h100-mig", 1, 0.5),
    }


def test_showback_charges_gpu_equivalent_hours_at_the_flavors_price(inference, admin_client):
    month = "2026-11"
    report = admin_client.get("/api/v1/showback/", {"month": month, "rollup": "false"}).json()
    [flavor] = [f for f in report["flavors"] if f["flavor_key"] == "k8s-west/h100-mig"]
    assert Decimal(flavor["price_per_device_hour"]) == Decimal("4.00") and flavor["hours_of"] == "GPU-equivalents"
    whole = [f for f in report["flavors"] if f["flavor_key"] == "k8s-west/a100-80gb"]
    assert all(f["hours_of"] == "devices" for f in whole)
    page = signed_in("admin").get("/showback/", {"month": month}).content.decode()
    assert "k8s-west/h100-mig <span" in page and "(GPU-equivalent-hours)" in page
    [line] = [
        ln
        for ln in report["lines"]
        if ln["unit_path"] == "acme/production/inference" and ln["flavor_key"] == flavor["flavor_key"]
    ]
    hours = UsageHour.objects.filter(
        unit=inference, hour__gte=datetime(2026, 11, 1, tzinfo=UTC), hour__lt=datetime(2026, 12, 1, tzinfo=UTC)
    )
    used = sum(h.within for h in hours)
    assert line["used_h"] == pytest.approx(used, abs=0.001)
    # charged for its guarantee's GPU-equivalent-hours, used or idle (5 × 720 h), at the price of one
    assert line["used_h"] + line["idle_h"] == pytest.approx(GUARANTEE * 720, abs=0.01) and line["borrowed_h"] == 0
    assert Decimal(line["cost"]) == Decimal("4.00") * GUARANTEE * 720


def test_lead_inference_sees_the_slices_its_guarantee_holds(inference):
    page = signed_in("lead-inference").get(f"/units/{inference.pk}/")
    text = page.content.decode()
    assert page.status_code == 200
    assert "35 × 1g.10gb or 10 × 3g.40gb" in text  # 5 GPU-equivalents
    assert "GPUs (GPU-equivalents on a shared flavor: its slices by their weight) over" in text  # the usage chart
