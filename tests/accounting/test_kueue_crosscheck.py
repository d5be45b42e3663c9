"""Kueue's own queue numbers through a real Prometheus, and the findings of setting them beside Allot's
records (issue #30.3). The exporter serves Kueue's metric families with the label sets of Kueue's
metrics reference (tests/fixtures/usage/kueue/kueue-metrics-at-ff69552.csv)."""

from __future__ import annotations

import csv
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from accounting.models import Finding, KueueQueueHour, SourceStatus, UsageHour
from accounting.services.findings import findings_detect
from accounting.services.kueue_metrics import usage_ingest_kueue_metrics
from tests.dcgm_prometheus import KUEUE

from .test_dcgm_usage import scrape

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "usage" / "kueue" / "kueue-metrics-at-ff69552.csv"
USAGE, RESERVED, PENDING = (
    "usage@acme.research.nlp@a100",
    "reservation@acme.research.nlp@a100",
    "pending@acme.research.nlp",
)


def test_the_served_series_carry_exactly_kueues_label_sets():
    reference = {row["metric"]: row["labels"].split(",") for row in csv.DictReader(REFERENCE.open())}
    for line in KUEUE.values():
        name, labels = line.split("{", 1)
        assert [pair.split("=")[0] for pair in labels.rstrip("}").split(",")] == reference[name]


@pytest.mark.django_db
@pytest.mark.prometheus
def test_kueues_queue_usage_reservation_and_pending_are_read_per_hour_and_again_the_same(
    org, settings, prometheus, dcgm_exporter
):
    settings.ALLOT_DCGM_PROMETHEUS = {"west": prometheus.url}
    scrape(dcgm_exporter, [{USAGE: 32, RESERVED: 40, PENDING: 1}, {USAGE: 24, RESERVED: 40, PENDING: 3}])
    served = dcgm_exporter.served
    run = usage_ingest_kueue_metrics(cluster=org.cluster)
    assert run.status == SourceStatus.OK, run.message
    rows = list(KueueQueueHour.objects.all())
    assert {(r.cluster_queue, r.unit_id, r.flavor_id) for r in rows} == {
        ("acme.research.nlp", org.nlp.pk, org.flavor.pk)
    }
    usage = sum(r.usage for r in rows)  # the scrape may straddle an hour: one row per hour it touched
    if len(rows) == 1:
        assert usage == pytest.approx(sum(served[USAGE]) / len(served[USAGE]))
        assert rows[0].reservation == pytest.approx(40) and rows[0].pending == pytest.approx(
            sum(served[PENDING]) / len(served[PENDING])
        )
    assert run.counts == {"queue_hours": len(rows), "queues": 1, "unresolved": 0}
    before = sorted(KueueQueueHour.objects.values_list("cluster_queue", "flavor_name", "hour", "usage", "reservation"))
    usage_ingest_kueue_metrics(cluster=org.cluster)
    after = sorted(KueueQueueHour.objects.values_list("cluster_queue", "flavor_name", "hour", "usage", "reservation"))
    assert after == before


@pytest.mark.django_db
def test_a_disagreement_and_quota_held_by_checks_become_findings_and_resolve(org):
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    for i in range(1, 5):  # the last four hours: Kueue says 32 in use and 40 reserved, Allot held 24
        hour = end - timedelta(hours=i)
        KueueQueueHour.objects.create(
            cluster=org.cluster,
            cluster_queue="acme.research.nlp",
            unit=org.nlp,
            flavor=org.flavor,
            flavor_name="a100",
            hour=hour,
            usage=32,
            reservation=40,
        )
        UsageHour.objects.create(unit=org.nlp, flavor=org.flavor, hour=hour, minutes=60, allocated=16)
        UsageHour.objects.create(unit=org.llm, flavor=org.flavor, hour=hour, minutes=30, allocated=4)  # its project
    findings_detect(end=end)
    found = {f.kind: f for f in Finding.objects.filter(kind__in=["kueue_disagrees", "quota_held_by_checks"])}
    assert set(found) == {"kueue_disagrees", "quota_held_by_checks"}
    # nlp held 16 device-hours in 60 minutes, its project llm 4 in 30 minutes: 16 + 8 = 24 devices on average
    assert "Kueue counted 32.0 devices in use, Allot 24.0" in found["kueue_disagrees"].summary
    assert found["kueue_disagrees"].unit_id == org.nlp.pk and found["kueue_disagrees"].flavor_id == org.flavor.pk
    assert (
        "held 8.0 devices of quota for workloads still waiting for admission checks"
        in found["quota_held_by_checks"].summary
    )

    KueueQueueHour.objects.update(usage=24, reservation=24)  # Kueue and Allot agree again
    findings_detect(end=end)
    states = set(
        Finding.objects.filter(kind__in=["kueue_disagrees", "quota_held_by_checks"]).values_list("state", flat=True)
    )
    assert states == {"resolved"}
