"""The reclaim SLO per contract (issue #44.4): every ask inside the guarantee while it was lent is timed from the
ask to the admission, including asks no borrower was preempted for; the finding, the API, the unit page's
"Promises kept" and the Prometheus histogram read the same reclaims."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from accounting.models import Allocation, WorkloadRecord
from accounting.policy.hold_findings import Reclaim, contracts_not_honoured
from accounting.policy.reclaim_slo import BUCKETS_S, histograms, percentile, reclaim_slo
from accounting.reclaims import reclaims

T = datetime(2026, 11, 2, 9, tzinfo=UTC)
MIN = timedelta(minutes=1)


def made(submitted_min, admitted_min, preempted_min=None, *, contract="standard", promised=900):
    pre = T + preempted_min * MIN if preempted_min is not None else None
    return Reclaim(1, "acme/nlp", 2, "acme/vision", 3, "west/a100", T + submitted_min * MIN, T + admitted_min * MIN,
                   pre, promised, 8, None, contract)  # fmt: skip


def test_the_slo_lines_count_what_was_kept_and_split_the_wait_at_the_preemption():
    lines = reclaim_slo([made(0, 5, 2), made(0, 30), made(10, 20, 16), made(0, 1, contract="strict", promised=60)])
    by = {line.contract: line for line in lines}
    standard, strict = by["standard"], by["strict"]
    assert (standard.contract, standard.reclaims, standard.within, standard.never_preempted) == ("standard", 3, 2, 1)
    assert (standard.p50_s, standard.p95_s) == (600, 1800)  # waits 5, 30 and 10 min: nearest rank
    assert (standard.decision_p50_s, standard.readmission_p50_s) == (120, 180)  # (2, 6) and (3, 4) min
    assert not standard.kept and abs(standard.share_within - 2 / 3) < 1e-9
    assert strict.kept and strict.never_preempted == 1 and strict.decision_p50_s is None
    assert percentile([5, 1, 3], 0.5) == 3 and percentile([7], 0.95) == 7
    counts, total, n = histograms([made(0, 5, 2), made(0, 30)])["standard"]
    assert n == 2 and total == 2100 and counts[-1] == 2
    assert counts[BUCKETS_S.index(300)] == 1 and counts[BUCKETS_S.index(1800)] == 2  # cumulative


def test_a_reclaim_no_borrower_was_preempted_for_is_a_broken_promise_said_as_such():
    found = contracts_not_honoured([made(0, 30)], T, T + timedelta(days=1))
    assert len(found) == 1 and "kept its lent devices: no borrower was preempted" in found[0].summary
    assert found[0].evidence["never_preempted"] == 1


def alloc(org, unit, sid, devices, borrowed, start, end, submitted=None, raw="Finished"):
    record = WorkloadRecord.objects.create(
        cluster=org.cluster, scheduler_id=sid, job_id=f"{unit.slug}/{sid}", unit=unit, flavor=org.flavor,
        devices=devices, submitted_at=submitted or start, admitted_at=start, state="finished",
    )  # fmt: skip
    return Allocation.objects.create(record=record, unit=unit, flavor=org.flavor, devices=devices, borrowed=borrowed,
                                     start=start, end=end, raw_state=raw, submitted_at=submitted)  # fmt: skip


@pytest.mark.django_db
def test_asks_that_waited_while_a_borrower_kept_the_lent_devices_are_counted_and_shown(org, admin_client):
    t0 = (timezone.now() - timedelta(days=2)).replace(hour=9, minute=0, second=0, microsecond=0)
    alloc(org, org.vision, "borrower", 8, 8, t0, t0 + timedelta(hours=2))  # borrowed, never preempted
    alloc(org, org.nlp, "late", 8, 0, t0 + 40 * MIN, t0 + 90 * MIN, submitted=t0 + 10 * MIN)  # waited 30 min
    alloc(org, org.nlp, "quick", 8, 0, t0 + 55 * MIN, t0 + 90 * MIN, submitted=t0 + 50 * MIN)  # 5 min
    alloc(org, org.nlp, "instant", 2, 0, t0 + 60 * MIN + 5 * timedelta(seconds=1), t0 + 90 * MIN,
          submitted=t0 + 60 * MIN)  # fmt: skip  # within a scheduling pass: no wait, no reclaim
    alloc(org, org.llm, "own", 20, 0, t0, t0 + timedelta(hours=3))  # llm's own work holds its guarantee
    alloc(org, org.llm, "self", 4, 0, t0 + 100 * MIN, t0 + 110 * MIN, submitted=t0 + 20 * MIN)  # waited for itself
    found = reclaims(t0, t0 + timedelta(days=1), {})
    assert (
        sorted((r.lender_path, r.borrower_path, r.preempted, r.contract) for r in found)
        == [("acme/research/nlp", "acme/research/vision", None, "standard")] * 2
    )
    [line] = reclaim_slo(found)
    assert (line.reclaims, line.within, line.never_preempted, line.p50_s, line.p95_s) == (2, 1, 2, 300, 1800)

    api = admin_client.get("/api/v1/reclaim-slo/", {"day": f"{t0:%Y-%m-%d}", "within": "acme/research"})
    assert api.status_code == 200, api.content
    [row] = api.json()["lines"]
    assert (row["lender"], row["never_preempted"], row["share_within"], row["promised_s"]) == (
        "acme/research/nlp", 2, 0.5, 900
    )  # fmt: skip
    assert admin_client.get("/api/v1/reclaim-slo/", {"day": "2026-13-01"}).status_code == 400
    page = admin_client.get(f"/units/{org.nlp.pk}/").content.decode()
    assert 'id="promises-table"' in page and "acme/research/nlp" in page and "50 %" in page
    metrics = admin_client.get("/metrics/usage").content.decode()
    assert 'allot_reclaim_wait_seconds_count{contract="standard"} 2.0' in metrics
    assert 'allot_reclaim_wait_seconds_bucket{contract="standard",le="300.0"} 1.0' in metrics


@pytest.mark.django_db
def test_a_closed_window_is_read_on_the_quotas_in_force_at_its_end(org):
    """Raising nlp's guarantee today to cover what its own work held then does not turn a past wait into a
    reclaim: the window's end is in the past, and its terms are those in force then (quotas/history.py)."""
    from quotas import services
    from quotas.policy import Resource

    t0 = T
    alloc(org, org.vision, "borrower", 8, 8, t0, t0 + timedelta(hours=2))
    alloc(org, org.nlp, "own", 30, 0, t0, t0 + timedelta(hours=3))  # nlp's own work holds all of its 30
    alloc(org, org.nlp, "asks", 8, 0, t0 + 40 * MIN, t0 + 90 * MIN, submitted=t0 + 10 * MIN)
    assert reclaims(t0, t0 + timedelta(days=1), {}) == []
    change = services.QuotaChange(org.nlp.pk, org.flavor.pk, Resource.GPU, 40, 0, 15)
    services.quota_set_bulk(actor=org.admin, reason="more", changes=[change])
    assert reclaims(t0, t0 + timedelta(days=1), {}) == []
