"""Waiting, explained, in the API (issue #44.5): a workload by its job's name, a unit's waiting work, and the
reader's rule (its owner, its unit's members and leads; everyone signed in under the default visibility)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from accounting.models import WorkloadRecord
from quotas.models import ChangeRequest, NamespaceBinding, Quota, ResourceFlavor
from quotas.services.change_requests import change_request_approve

pytestmark = pytest.mark.django_db


def records(demo):
    """speech holds its whole ceiling on one flavor with ``first``; ``second`` (erin's, job/second) waits."""
    unit = NamespaceBinding.objects.get(cluster=demo, namespace="speech").unit
    quota = (
        Quota.objects.filter(unit=unit, flavor__cluster=demo, resource="nvidia.com/gpu").exclude(guarantee=0).first()
    )
    assert quota is not None, "the demo gives speech a guarantee on k8s-west"
    flavor = ResourceFlavor.objects.get(pk=quota.flavor_id)
    now = timezone.now()
    ceiling = quota.guarantee + quota.burst
    common = {"cluster": demo, "unit": unit, "account": "speech"}
    WorkloadRecord.objects.create(
        **common, scheduler_id="u1", job_id="speech/job-first-1", owner="dan", flavor=flavor,
        flavor_name=flavor.name, devices=ceiling, state="running", submitted_at=now - timedelta(hours=1),
        admitted_at=now - timedelta(hours=1),
    )  # fmt: skip
    ask = {"pods": 1, "per_pod": 1, "devices": 1, "job": "Job/second", "reason": "Pending",
           "message": "couldn't assign flavors", "placement": {"nodeSelector": dict(flavor.node_labels)}}  # fmt: skip
    WorkloadRecord.objects.create(
        **common, scheduler_id="u2", job_id="speech/job-second-2", owner="erin", state="pending",
        submitted_at=now - timedelta(minutes=2), track={"uid": "u2", "ask": ask}, resources={"queue": "q"},
    )  # fmt: skip
    watched(demo, now)
    return unit, flavor


def watched(cluster, at):
    """The usage watcher's run for the cluster, its view refreshed at ``at``."""
    from accounting.models import SourceKind, SourceRun

    SourceRun.objects.filter(cluster=cluster, source=SourceKind.KUEUE).delete()
    SourceRun.objects.create(source=SourceKind.KUEUE, cluster=cluster, started_at=at, watermark=at)


def test_a_workload_is_explained_by_its_jobs_name_and_a_units_waiting_work_is_listed(demo, admin_client):
    unit, flavor = records(demo)
    answer = admin_client.get("/api/v1/waiting/k8s-west/speech/job/second/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["workload"], body["job"], body["unit"], body["state"]) == (
        "speech/job-second-2", "Job/second", unit.path, "pending"
    )  # fmt: skip
    assert body["causes"][0]["code"] == "borrowing-limit"
    assert "speech/job-first-1" in " ".join(body["causes"][0]["evidence"])
    assert body["scheduler_says"] == "Pending: couldn't assign flavors"
    assert body["room"][flavor.key]["room"] == 0
    listed = admin_client.get("/api/v1/waiting/", {"unit": unit.path}).json()
    assert [w["workload"] for w in listed["waiting"]] == ["speech/job-second-2"]
    bad = admin_client.get("/api/v1/waiting/", {"unit": "nowhere"})
    assert bad.status_code == 400 and "unit" in bad.json()
    assert admin_client.get("/api/v1/waiting/k8s-west/speech/job/third/").status_code == 404
    assert admin_client.get("/api/v1/waiting/nowhere/speech/job/second/").status_code == 404


def test_under_lead_visibility_the_owner_and_the_units_lead_read_it_and_another_lead_does_not(demo, client, settings):
    unit, _ = records(demo)
    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    url = "/api/v1/waiting/k8s-west/speech/job/second/"
    erin = User.objects.create_user("erin")
    for username, status in (("lead-nlp", 404), ("lead-speech", 200), ("erin", 200)):
        client.force_login(User.objects.get(username=username) if username != "erin" else erin)
        assert client.get(url).status_code == status, username
        listed = client.get("/api/v1/waiting/", {"unit": unit.path}).json()["waiting"]
        assert len(listed) == (1 if status == 200 else 0), username


@pytest.mark.django_db(transaction=True)
def test_an_admitted_workload_says_it_is_running_not_why_it_waits(demo, admin_client):
    _, flavor = records(demo)
    body = admin_client.get("/api/v1/waiting/k8s-west/speech/job-first-1/").json()  # the Workload's own name
    [cause] = body["causes"]
    assert cause["code"] == "not-waiting"
    assert cause["title"].startswith(f"admitted on {flavor.name} since ")
    assert cause["title"].endswith("it is running, not waiting")
    assert body["ways_out"] == [] and body["state"] == "running"


def test_an_unknown_workload_is_a_404_only_while_allots_view_is_fresh(demo, admin_client):
    """With the usage watcher down, "no such workload" would be a guess: the answer says how old the view is."""
    records(demo)
    fresh = admin_client.get("/api/v1/waiting/k8s-west/speech/job/nothing/")
    assert fresh.status_code == 404 and re.search(r"in Allot's view of it refreshed \d+ s ago$", fresh.json()["detail"])
    watched(demo, timezone.now() - timedelta(hours=2))
    stale = admin_client.get("/api/v1/waiting/k8s-west/speech/job/nothing/")
    assert stale.status_code == 503
    assert re.search(
        r"was last refreshed 720\d s ago, so it cannot tell whether that workload exists", stale.json()["detail"]
    )
    # a workload it has seen is still explained, with the view's age
    known = admin_client.get("/api/v1/waiting/k8s-west/speech/job/second/").json()
    assert known["workload"] == "speech/job-second-2" and known["age_seconds"] >= 7200


def test_kubectl_allot_why_asks_the_api_with_the_readers_token_and_prints_causes_and_ways_out(demo, live_server):
    """The plugin as installed (``kubectl-allot`` on PATH), against a running server, as erin."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from rest_framework.authtoken.models import Token

    records(demo)
    token = Token.objects.create(user=User.objects.create_user("erin"))
    plugin = shutil.which("kubectl-allot", path=str(Path(sys.executable).parent))  # installed beside the interpreter
    assert plugin, "the package installs kubectl-allot"
    env = {"PATH": "/usr/bin:/bin", "ALLOT_URL": live_server.url, "ALLOT_TOKEN": token.key, "ALLOT_CLUSTER": "k8s-west"}
    done = subprocess.run([plugin, "why", "job/second", "-n", "speech"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("speech/job-second-2 (Job/second) of ") and "asks for 1 devices" in out
    assert "Why it waits:\n  1. " in out and "has reached its ceiling" in out
    assert "What would make it run:" in out and "speech/job-first-1" in out
    assert "The scheduler says: Pending: couldn't assign flavors" in out
    missing = subprocess.run([plugin, "why", "job/nothing", "-n", "speech"], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "Allot answered 404" in missing.stderr
    unset = subprocess.run([plugin, "why", "job/second"], capture_output=True, text=True, env={"PATH": "/usr/bin"})
    assert unset.returncode == 2 and "set ALLOT_URL, ALLOT_TOKEN, ALLOT_CLUSTER" in unset.stderr


def test_the_unit_page_shows_waiting_now_and_links_each_to_its_explanation(demo, client, settings):
    unit, _ = records(demo)
    client.force_login(User.objects.get(username="lead-speech"))
    page = client.get(f"/units/{unit.pk}/").content.decode()
    assert 'id="waiting"' in page and "speech/job-second-2" in page and "has reached its ceiling" in page
    link = "/waiting/k8s-west/speech/job-second-2/"
    assert f'href="{link}"' in page
    detail = client.get(link).content.decode()
    assert "Why speech/job-second-2 waits" in detail and 'id="causes"' in detail and "speech/job-first-1" in detail
    assert "The scheduler says: Pending: couldn&#x27;t assign flavors" in detail
    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    client.force_login(User.objects.get(username="lead-nlp"))
    assert client.get(link).status_code == 404
    assert "speech/job-second-2" not in client.get(f"/units/{unit.pk}/").content.decode()


def test_a_quota_change_way_out_opens_the_quota_form_filled_in_with_its_preview_and_saved_it_lets_the_job_start(
    demo, client
):
    """speech is at its ceiling on a flavor with room: the page links its lead to the quota form with the burst
    raised by what the job asks, checked and previewed as if typed (nothing saved); saved, the job would start.
    A member who may not edit the unit's quotas sees the way out without the link."""
    unit, flavor = records(demo)
    quota = Quota.objects.get(unit=unit, flavor=flavor, resource="nvidia.com/gpu")
    before = (quota.guarantee, quota.burst, quota.version)
    page_url = "/waiting/k8s-west/speech/job-second-2/"
    client.force_login(User.objects.get(username="lead-speech"))
    page = client.get(page_url).content.decode()
    ways = page[page.index('id="ways-out"') :]
    link = ways[ways.index('class="quota-change" href="') + 27 :].split('"')[0].replace("&amp;", "&")
    assert link.startswith(f"/units/{unit.pk}/quotas/?") and f"burst-{flavor.pk}-gpu={quota.burst + 1}" in link
    form = client.get(link).content.decode()
    assert 'id="preview"' in form and "What would change" in form
    ceiling = quota.guarantee + quota.burst
    assert f"speech may hold up to {ceiling + 1} {flavor.accelerator_model} GPUs when it borrows, was {ceiling}" in form
    assert "so that speech/job-second-2 on k8s-west can start" in form  # the reason, filled in
    mistyped = client.get(link.replace(f"gpu={quota.burst + 1}", "gpu=eleven")).content.decode()
    assert 'value="eleven"' in mistyped and 'aria-invalid="true"' in mistyped and 'id="preview"' not in mistyped
    quota.refresh_from_db()
    assert (quota.guarantee, quota.burst, quota.version) == before  # a preview saves nothing
    saved = client.post(
        f"/units/{unit.pk}/quotas/",
        {f"burst-{flavor.pk}-gpu": str(quota.burst + 1), f"version-{flavor.pk}-gpu": str(quota.version),
         "reason": "so that speech/job-second-2 on k8s-west can start"},
    )  # fmt: skip
    assert saved.status_code == 302 and saved["Location"].startswith("/requests/"), saved.content.decode()[:2000]
    sent = ChangeRequest.objects.get(pk=int(saved["Location"].strip("/").split("/")[-1]))  # a team lead requests
    assert sent.reason == "so that speech/job-second-2 on k8s-west can start"
    change_request_approve(actor=User.objects.get(username="head-research"), request=sent)
    quota.refresh_from_db()
    assert quota.burst == before[1] + 1
    after = client.get("/api/v1/waiting/k8s-west/speech/job/second/").json()
    assert after["room"][flavor.key]["room"] == 1 and all(c["code"] != "borrowing-limit" for c in after["causes"])
    client.force_login(User.objects.create_user("erin"))  # speech's member by ownership, not its lead
    WorkloadRecord.objects.filter(job_id="speech/job-first-1").update(devices=quota.guarantee + quota.burst)
    seen = client.get(page_url).content.decode()
    assert "raise acme/research/speech&#x27;s burst" in seen and 'class="quota-change"' not in seen


def test_the_answer_carries_a_band_from_past_waits_and_its_calibration(demo, admin_client):
    """Twelve of speech's past jobs waited 2 … 24 min: the band is their 10th to 90th percentile less the 2 min it
    has waited, with the share of past jobs that started inside the band they would have had."""
    from django.core.cache import cache

    unit, flavor = records(demo)
    now = timezone.now()
    for i in range(12):
        submitted = now - timedelta(days=2, hours=i)
        WorkloadRecord.objects.create(
            cluster=demo, unit=unit, account="speech", scheduler_id=f"past-{i}", job_id=f"speech/past-{i}",
            flavor=flavor, flavor_name=flavor.name, devices=1, state="finished", submitted_at=submitted,
            admitted_at=submitted + timedelta(minutes=2 * (i + 1)),
        )  # fmt: skip
    cache.clear()
    body = admin_client.get("/api/v1/waiting/k8s-west/speech/job/second/").json()
    estimate = body["estimate"]
    assert estimate["scope"] == "unit" and estimate["basis"] == 11  # the 11 that waited at least its 2 min
    after = datetime.fromisoformat(estimate["start_after"].replace("Z", "+00:00")) - now
    by = datetime.fromisoformat(estimate["start_by"].replace("Z", "+00:00")) - now
    # of the 4 … 24 min waits: the 2nd (6 min) and the 10th (22 min), each less the 2 min it waited
    assert timedelta(minutes=3) < after < timedelta(minutes=5) and timedelta(minutes=19) < by < timedelta(minutes=21)
    # 13 started jobs (the 12 and first): the first 10 had too few predecessors for a band
    assert body["calibration"]["jobs"] == 13 - 10 and 0 <= body["calibration"]["share_inside"] <= 1
    assert "percentile of 11 comparable waits" in body["estimate_note"]
    WorkloadRecord.objects.filter(scheduler_id__startswith="past-").delete()
    cache.clear()
    none = admin_client.get("/api/v1/waiting/k8s-west/speech/job/second/").json()
    assert none["estimate"] is None and "fewer than 10" in none["estimate_note"]
