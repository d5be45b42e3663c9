"""Findings on the database: the detectors over real rollups, one finding per condition while it lasts,
resolution when it ends, dismissal with a reason (and a snooze), one-click change requests approved
through the usual flow, audit rows, mail to the lead, the API and the inbox."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail

from accounting.models import Finding, FindingState
from accounting.policy.findings import Thresholds
from accounting.services import usage_replay_load, usage_rollup
from accounting.services.finding_actions import finding_dismiss, finding_request_change
from accounting.services.findings import findings_detect
from quotas.errors import InputError
from quotas.models import AuditEvent, ChangeRequest, Quota
from quotas.services import change_request_approve
from tests.accounting.test_usage import HEADER
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
DAY = datetime(2026, 11, 2, tzinfo=UTC)
TH = Thresholds(idle_window_days=1)


def a_day(org, start=DAY):
    """nlp (guarantee 30) holds 2 all day while vision borrows and queues; ops wants 40 of its 30 and
    cannot borrow."""
    rows = [HEADER]
    for i in range(24 * 60):
        at = (start + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M")
        rows += [f"{at},nlp,a100,30,2,0", f"{at},vision,a100,20,40,5", f"{at},ops,a100,30,30,10"]
    usage_replay_load(lines=rows, cluster=org.cluster, units={"nlp": org.nlp, "vision": org.vision, "ops": org.ops},
                      name=f"{start:%Y-%m-%d}")  # fmt: skip
    usage_rollup(start=start, end=start + timedelta(days=1))


@pytest.fixture
def lead(org):
    user = UserFactory(email="nlp-lead@example.org")
    org.nlp.leads.add(user)
    return user


def test_detectors_find_the_idle_guarantee_and_the_unmet_demand_once(org, lead, django_capture_on_commit_callbacks):
    a_day(org)
    with django_capture_on_commit_callbacks(execute=True):
        run = findings_detect(end=DAY + timedelta(days=1), th=TH)
    assert run.found == {"idle_guarantee": 1, "demand_above_guarantee": 1, "idle_reservation": 1} and run.opened == 3
    idle = Finding.objects.get(kind="idle_guarantee")
    # the suggestion is the governance plan's item for nlp over the same window (issue #26): it held 2 of
    # its 30, so the guarantee comes down to what its project llm is guaranteed (20) and the rest lends
    plan = {"unit": org.nlp.pk, "flavor": org.flavor.pk, "guarantee": 20, "burst": 10, "lendable": 18}
    assert idle.unit == org.nlp and idle.action == plan
    assert idle.evidence["plan"]["verdict"] == "shrink" and "units inside it" in idle.suggestion
    assert (
        idle.evidence["used_share"] == pytest.approx(2 / 30, abs=1e-4) and idle.evidence["others_waiting_hours"] == 24
    )
    assert not idle.partial and len(idle.evidence["daily"]) == 1
    demand = Finding.objects.get(kind="demand_above_guarantee")
    grow = {"unit": org.ops.pk, "flavor": org.flavor.pk, "guarantee": 40, "burst": 0, "lendable": 10}
    assert demand.unit == org.ops and demand.action == grow
    reservation = Finding.objects.get(kind="idle_reservation")  # the fixture's 10 "serving" devices
    assert reservation.evidence["peak_held"] == 72 and reservation.evidence["capacity_outside"] == 100
    assert [m.to for m in mail.outbox] == [["nlp-lead@example.org"]]  # the lead of the idle unit hears of it
    assert AuditEvent.objects.filter(action="finding_open").count() == 3

    again = findings_detect(end=DAY + timedelta(days=1), th=TH)
    assert (again.opened, again.updated) == (0, 3) and Finding.objects.count() == 3
    assert Finding.objects.get(kind="idle_guarantee").detections == 2

    a_day(org, DAY + timedelta(days=1))
    later = findings_detect(end=DAY + timedelta(days=2), th=TH)
    idle.refresh_from_db()
    assert later.opened == 0 and idle.window_end == DAY + timedelta(days=2)  # one finding, a growing window
    assert idle.window_start == DAY

    quiet = findings_detect(end=DAY + timedelta(days=5), th=TH)  # days without usage: nothing seen any more
    idle.refresh_from_db()
    assert quiet.found == {"idle_reservation": 1}  # its window is a week: it still sees the two days, partially
    assert Finding.objects.get(kind="idle_reservation").partial
    assert quiet.resolved == 2 and idle.state == FindingState.RESOLVED and "no longer detected" in idle.state_reason


def test_a_gap_in_telemetry_makes_the_evidence_partial(org, lead):
    rows = [HEADER] + [
        f"{(DAY + timedelta(minutes=i)):%Y-%m-%dT%H:%M},{u},a100,{q},{h},{w}"
        for i in range(18 * 60)
        for u, q, h, w in (("nlp", 30, 2, 0), ("vision", 20, 40, 5))
    ]
    usage_replay_load(lines=rows, cluster=org.cluster, units={"nlp": org.nlp, "vision": org.vision}, name="18h")
    usage_rollup(start=DAY, end=DAY + timedelta(days=1))
    findings_detect(end=DAY + timedelta(days=1), th=TH)
    idle = Finding.objects.get(kind="idle_guarantee")
    assert idle.partial and idle.evidence["hours_with_telemetry"] == 18 and idle.evidence["hours_in_window"] == 24


def test_dismissing_needs_a_reason_and_keeps_the_condition_quiet(org, lead):
    a_day(org)
    findings_detect(end=DAY + timedelta(days=1), th=TH)
    idle = Finding.objects.get(kind="idle_guarantee")
    with pytest.raises(InputError, match="reason"):
        finding_dismiss(actor=lead, finding=idle, reason=" ")
    finding_dismiss(actor=lead, finding=idle, reason="the conference deadline is next week")
    idle.refresh_from_db()
    assert idle.state == FindingState.DISMISSED and idle.state_reason == "the conference deadline is next week"
    run = findings_detect(end=DAY + timedelta(days=1), th=TH)
    assert run.snoozed == 1 and Finding.objects.filter(kind="idle_guarantee").count() == 1
    event = AuditEvent.objects.get(action="finding_dismiss")
    assert event.actor == lead and event.unit_path == "acme/research/nlp"


def test_one_click_turns_the_suggestion_into_a_change_request_approved_the_usual_way(org, lead):
    a_day(org)
    findings_detect(end=DAY + timedelta(days=1), th=TH)
    idle = Finding.objects.get(kind="idle_guarantee")
    request = finding_request_change(actor=lead, finding=idle)
    assert request.status == "pending" and request.unit == org.nlp
    assert f"finding #{idle.pk}" in request.reason and "The plan for" in request.reason
    assert (request.changes[0]["guarantee"], request.changes[0]["lendable"]) == (20, 18)
    idle.refresh_from_db()
    assert idle.state == FindingState.ACKNOWLEDGED and idle.change_request == request
    change_request_approve(actor=org.admin, request=request, comment="yes")
    quota = Quota.objects.get(unit=org.nlp, flavor=org.flavor, resource="nvidia.com/gpu")
    assert (quota.guarantee, quota.lendable) == (20, 18)  # the plan's item, applied through the usual flow
    with pytest.raises(InputError, match="suggests no quota change"):
        other = Finding.objects.create(
            kind="zombie_allocation", key="z", unit=org.nlp, window_start=DAY, window_end=DAY, summary="s",
            suggestion="ask", opened_at=DAY, updated_at=DAY,
        )  # fmt: skip
        finding_request_change(actor=lead, finding=other)


def test_the_api_and_the_inbox(org, lead, client, admin_client):
    a_day(org)
    findings_detect(end=DAY + timedelta(days=1), th=TH)
    idle = Finding.objects.get(kind="idle_guarantee")
    listed = admin_client.get("/api/v1/findings/", {"within": "acme/research", "state": "open"}).json()
    assert [f["kind"] for f in listed["results"]] == ["idle_guarantee"]
    assert listed["results"][0]["cost"] is None  # the fixture's flavor has no price: unknown, not zero
    client.force_login(lead)
    bad = client.post(f"/api/v1/findings/{idle.pk}/dismiss/", {"reason": ""}, content_type="application/json")
    assert bad.status_code == 400 and "reason" in str(bad.json())
    ops = Finding.objects.get(kind="demand_above_guarantee")
    refused = client.post(f"/api/v1/findings/{ops.pk}/acknowledge/", {}, content_type="application/json")
    assert refused.status_code == 403  # not the nlp lead's unit
    home = client.get("/").content.decode()
    assert "1 open finding" in home
    inbox = client.get("/findings/").content.decode()
    yours = inbox.split("<h2>Your units")[1].split("Elsewhere")[0]
    assert "acme/research/nlp used 7% of its guarantee" in yours and "Request this change" in yours
    assert "acme/ops wanted more than its guarantee" in inbox.split("Elsewhere")[1]
    # issue #27.8: waiting is said as waiting (device-hours queued), never as money spent
    assert "240.0 device-hours queued" in inbox.split("Elsewhere")[1]
    done = client.post(f"/findings/{idle.pk}/act/", {"do": "request-change"})
    change = ChangeRequest.objects.get()
    assert done.status_code == 302 and done["Location"].endswith(f"/requests/{change.pk}/")
    made = client.post(f"/api/v1/findings/{ops.pk}/request-change/", {}, content_type="application/json")
    assert made.status_code == 403


def test_thresholds_out_of_range_stop_the_detectors_with_their_names(org, settings):
    from accounting.services.findings import thresholds

    settings.ALLOT_FINDINGS_THRESHOLDS = {"idle_used_below": 20.0, "stuck_minutes": 0}
    with pytest.raises(ValueError, match=r"ALLOT_FINDINGS_\*: idle_used_below = 20.0: give a share between 0 and 1"):
        thresholds()
    settings.ALLOT_FINDINGS_THRESHOLDS = {"idle_used_below": 0.3}
    assert thresholds().idle_used_below == 0.3 and thresholds().idle_window_days == 5


def test_devices_held_with_no_measured_activity_are_a_zombie_with_the_workloads_named(org):
    from accounting.models import Allocation, UsageHour, WorkloadRecord

    for h in range(3):  # three hours holding 8 GPUs, 0.2 device-hours of them measured busy
        UsageHour.objects.create(unit=org.nlp, flavor=org.flavor, hour=DAY + timedelta(hours=h), minutes=60,
                                 guarantee=30, allocated=8, within=8, active=0.2)  # fmt: skip
    record = WorkloadRecord.objects.create(cluster=org.cluster, scheduler_id="u-1", job_id="nlp/train-7", unit=org.nlp,
                                           flavor=org.flavor, devices=8, state="running")  # fmt: skip
    Allocation.objects.create(record=record, unit=org.nlp, flavor=org.flavor, devices=8, start=DAY - timedelta(hours=1))
    findings_detect(end=DAY + timedelta(days=1), th=TH)
    zombie = Finding.objects.get(kind="zombie_allocation")
    assert zombie.unit == org.nlp and zombie.evidence["workloads"] == ["nlp/train-7"]
    assert zombie.evidence["held_h"] == 24 and zombie.evidence["active_h"] == 0.6
    assert (zombie.window_start, zombie.window_end) == (DAY, DAY + timedelta(hours=3))
