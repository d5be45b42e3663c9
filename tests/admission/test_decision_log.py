"""No decision is ever lost from the decision log: any byte sequence a review carries is stored safely, a row the
database refuses does not hold back the others and is spilled to a file, counted and said by readiness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from admission.models import AdmissionDecision
from admission.runtime import STATE, decision_row, safe
from tests.admission.test_webhook import LABELS, TOKEN, answer, post, review, workload

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def webhook(demo, settings, tmp_path):
    settings.ALLOT_ADMISSION_TOKEN = TOKEN
    settings.ALLOT_ADMISSION_BACKGROUND = False
    settings.ALLOT_ADMISSION_CLUSTER = "k8s-west"
    settings.ALLOT_ADMISSION_SPILL_FILE = str(tmp_path / "spill" / "unlogged.jsonl")
    STATE.policy = None
    STATE.log_error, STATE.spilled = "", 0
    yield
    STATE.policy = None
    STATE.pending.clear()
    STATE.log_error, STATE.spilled = "", 0


def test_safe_escapes_what_a_backend_refuses_and_keeps_everything_else():
    assert safe("train") == "train"
    assert safe("a\x00b") == "a\\x00b"
    assert safe("caf\u00e9 \ud800") == "caf\u00e9 \\ud800"  # a lone surrogate is not UTF-8
    assert safe("\x00\u00e9") == "\\x00\u00e9"


def test_a_nul_byte_in_any_field_is_stored_escaped_and_the_log_goes_on():
    """The review that stopped a worker's decision log for good: a NUL byte in a label value, the name and the
    uid (PostgreSQL's text refuses NUL, so the whole COPY failed at every flush)."""
    bad = workload("Pod", labels={**LABELS, "allot.dev/owner": "al\x00ice", "allot.dev/tier": "P\x009"})
    bad["metadata"]["name"] = "tr\x00ain"
    assert answer(post("validate", review(bad, "", "Pod", uid="u\x00id")))["allowed"] is False
    STATE.flush()
    row = AdmissionDecision.objects.get()
    assert (row.uid, row.name, row.owner) == ("u\\x00id", "tr\\x00ain", "al\\x00ice")
    assert "\x00" not in row.message
    for i in range(3):  # later decisions are written as before
        post("validate", review(workload("Pod", labels={**LABELS, "allot.dev/tier": "P9"}), "", "Pod", uid=f"n{i}"))
    STATE.flush()
    assert AdmissionDecision.objects.count() == 4
    assert not STATE.log_error


@pytest.mark.postgres
def test_a_row_the_database_refuses_is_spilled_said_and_the_rest_written(settings):
    assert connection.vendor == "postgresql"  # the marker: PostgreSQL enforces the column length refused here

    def row(uid, reason="allowed"):
        return decision_row(
            webhook="validate", request={"uid": uid}, allowed=True, reason=reason, message="", unit="", latency_ms=1
        )

    refused = row("r", reason="x" * 40)  # reason is varchar(32): PostgreSQL refuses the row
    STATE.record(refused)
    assert STATE.flush() == 1
    [line] = Path(settings.ALLOT_ADMISSION_SPILL_FILE).read_text().splitlines()
    spilled = json.loads(line)
    assert spilled["uid"] == "r" and "value too long" in spilled["why"]
    # readiness says so (still 200: every decision is answered, and none is lost)
    ready = Client().get("/admission/readyz")
    assert ready.status_code == 200
    said = ready.json()["decision_log"]
    assert said["spilled_here"] == 1 and said["spill_file"] == settings.ALLOT_ADMISSION_SPILL_FILE
    assert "value too long" in said["failing"][0]
    # in a batch, the refused row does not hold back the others; a written row clears the failure
    for one in (row("g0"), row("r2", reason="y" * 33), row("g1")):
        STATE.record(one)
    assert STATE.flush() == 3
    assert sorted(AdmissionDecision.objects.values_list("uid", flat=True)) == ["g0", "g1"]
    assert len(Path(settings.ALLOT_ADMISSION_SPILL_FILE).read_text().splitlines()) == 2
    said = Client().get("/admission/readyz").json()["decision_log"]
    assert said["failing"] == [] and said["spilled_here"] == 2


def test_readiness_says_which_worker_of_the_pod_cannot_log_and_a_refresh_does_not_unsay_it(settings, tmp_path):
    """Across the pod's workers (admission.workers): a worker whose log fails publishes why, every later state it
    publishes (a policy refresh included) still says so, and any worker's readiness answer names it."""
    import os

    from admission import workers

    settings.ALLOT_ADMISSION_STATE_DIR = str(tmp_path / "state")
    other = os.getppid()  # a live process standing for another worker of the pod
    workers.publish(7, log_error="OperationalError: the database is away", pid=other)
    STATE.log_error = "DataError: value too long"
    assert STATE.refresh()  # publishes this worker's new revision: its log's failure goes with it
    mine = [w for w in workers.workers() if w["pid"] == os.getpid()]
    assert mine and mine[0]["log_error"] == "DataError: value too long"
    said = Client().get("/admission/readyz").json()["decision_log"]["failing"]
    assert f"worker {other}: OperationalError: the database is away" in said
    assert f"worker {os.getpid()}: DataError: value too long" in said
