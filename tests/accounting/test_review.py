"""The monthly governance review: the tables and their stable columns, every format read back with a
reader (csv, openpyxl, pdftotext), stored with checksums (a rebuild is a new version), the command, beat's task,
the API with progress, the pages, and recommendations accepted as change requests."""

from __future__ import annotations

import csv
import hashlib
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.utils import timezone
from openpyxl import load_workbook

from accounting.models import Review, UsageHour
from accounting.services.review import review_generate
from accounting.services.review_tables import COLUMNS, review_data
from quotas.models import ChangeRequest
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
PDF = pytest.mark.skipif(not shutil.which("pdftotext"), reason="needs poppler-utils (./dev test installs it)")


@pytest.fixture
def month(org, settings, tmp_path):
    """November 2026, every hour: nlp holds 1 of its 30, ops wants 40 of its 30, vision borrows 5."""
    start = datetime(2026, 11, 1, tzinfo=UTC)
    rows = []
    for i in range(30 * 24):
        hour = start + timedelta(hours=i)
        for unit, g, held, queued in ((org.nlp, 30, 1, 0), (org.vision, 20, 25, 2), (org.ops, 30, 30, 10)):
            rows.append(
                UsageHour(unit=unit, flavor=org.flavor, hour=hour, minutes=60, guarantee=g, allocated=held,
                          within=min(held, g), borrowed=max(0, held - g), pending=queued, productive=held,
                          productive_estimated=True)
            )  # fmt: skip
    UsageHour.objects.bulk_create(rows)
    return "2026-11"


def test_the_tables_say_what_the_month_was(org, month):
    from accounting.models import Allocation, WorkloadRecord

    t0 = datetime(2026, 11, 2, 9, tzinfo=UTC)
    for unit, sid, borrowed, start, end, state, submitted in (
        (org.vision, "b", 8, t0, t0 + timedelta(minutes=20), "evicted Preempted", t0),
        (
            org.nlp,
            "l",
            0,
            t0 + timedelta(minutes=40),
            t0 + timedelta(minutes=50),
            "Finished",
            t0 + timedelta(minutes=10),
        ),
    ):
        record = WorkloadRecord.objects.create(
            cluster=org.cluster,
            scheduler_id=sid,
            unit=unit,
            flavor=org.flavor,
            devices=8,
            state="finished",
            submitted_at=submitted,
            admitted_at=start,
        )
        Allocation.objects.create(record=record, unit=unit, flavor=org.flavor, devices=8, borrowed=borrowed,
                                  start=start, end=end, raw_state=state, submitted_at=submitted)  # fmt: skip
    data = review_data(org.acme, month)
    units = {(u["unit_path"], u["flavor"]): u for u in data.tables["units"]}
    ops = units[("acme/ops", "west/a100")]
    assert (ops["guarantee"], ops["allocated_h"], ops["pending_h"], ops["telemetry_hours"]) == (30, 21_600, 7_200, 720)
    verdicts = {r["unit_path"]: r for r in data.tables["recommendations"]}
    assert verdicts["acme/ops"]["verdict"] == "grow" and verdicts["acme/ops"]["guarantee_to"] == 40
    # shrink, but never below what its child llm is guaranteed (20), which has no usage of its own
    assert verdicts["acme/research/nlp"]["verdict"] == "shrink" and verdicts["acme/research/nlp"]["guarantee_to"] == 20
    # vision lives on borrowed devices every hour (25 held of 20, 2 queued): its guarantee is the one to grow
    assert (
        verdicts["acme/research/vision"]["verdict"] == "grow" and verdicts["acme/research/vision"]["guarantee_to"] == 27
    )
    nlp = units[("acme/research/nlp", "west/a100")]  # waited 30 min for its guarantee; the contract says 15
    assert (nlp["reclaims_within_promise"], nlp["reclaims_beyond_promise"]) == (0, 1)
    assert data.summary["gap_hours"] == 0 and not data.summary["has_last_month"]
    assert data.tables["quota_changes"] == []  # the fixture's edits were made today, not in November
    now = review_data(org.acme, timezone.now().strftime("%Y-%m"))
    changes = now.tables["quota_changes"]
    assert {c["unit_path"] for c in changes} >= {"acme/research/nlp", "acme/ops"}  # this month's: the fixture's
    assert all(c["actor"] == org.admin.username and c["reason"] == "test fixture" for c in changes)
    assert now.tables["units"] == [] and now.summary["cost"] is None  # no usage yet: said, not a crash


@PDF
def test_every_format_reads_back_and_is_stored_with_checksums(org, month, tmp_path, django_capture_on_commit_callbacks):
    lead = UserFactory(email="ceo@example.org")
    org.acme.leads.add(lead)
    with django_capture_on_commit_callbacks(execute=True):
        review = review_generate(unit=org.acme, month=month)
    stored = {f.name: bytes(f.content) for f in review.stored_files.all()}
    assert set(stored) == set(review.files) and len(review.files) == len(COLUMNS) + 2
    for name, digest in review.files.items():
        assert hashlib.sha256(stored[name]).hexdigest() == digest
    root = tmp_path / "read"
    for name, content in stored.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    csvs = {Path(n).stem: root / n for n in review.files if n.endswith(".csv")}
    for table, columns in COLUMNS.items():
        with csvs[table].open() as f:
            assert next(csv.reader(f)) == columns
    with csvs["units"].open() as f:
        allocated = {r["unit_path"]: float(r["allocated_h"]) for r in csv.DictReader(f)}
    assert allocated == {"acme/ops": 21_600.0, "acme/research/nlp": 720.0, "acme/research/vision": 18_000.0}
    book = load_workbook(root / next(n for n in review.files if n.endswith(".xlsx")))
    units = book["units"]
    assert units.freeze_panes == "A2" and units["F2"].number_format == "#,##0.0" and len(units._charts) == 1
    pdf = root / next(n for n in review.files if n.endswith(".pdf"))
    text = " ".join(
        subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout.split()
    )
    assert f"Governance review — acme, {month}" in text and "guarantee 30 → 40" in text and "page 2 of" in text
    assert [m.to for m in mail.outbox] == [["ceo@example.org"]]
    again = review_generate(unit=org.acme, month=month)  # a rebuild is a new version beside the first
    assert (again.version, Review.objects.count()) == (2, 2) and again.differs["same_figures"]
    assert {f.name: bytes(f.content) for f in Review.objects.get(pk=review.pk).stored_files.all()} == stored


def test_the_command_writes_what_it_is_asked_for_and_names_bad_arguments(org, month, tmp_path):
    call_command(
        "allot_review",
        "--unit",
        "acme/research",
        "--month",
        month,
        "--format",
        "csv,xlsx",
        "--out",
        str(tmp_path / "out"),
    )
    written = sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written == sorted([f"{t}.csv" for t in COLUMNS] + [f"review-acme-research-{month}.xlsx"])
    with pytest.raises(CommandError, match="--unit 'acme/nowhere'"):
        call_command("allot_review", "--unit", "acme/nowhere", "--out", str(tmp_path))
    with pytest.raises(CommandError, match="'May 2020' is not YYYY-MM"):
        call_command("allot_review", "--unit", "acme", "--month", "May 2020", "--out", str(tmp_path))
    with pytest.raises(CommandError, match="format docx"):
        call_command("allot_review", "--unit", "acme", "--month", month, "--format", "docx", "--out", str(tmp_path))


def test_build_from_the_api_accept_from_the_page(org, month, admin_client, monkeypatch):
    from config.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    started = admin_client.post(
        "/api/v1/reviews/build/", {"unit": "acme", "month": month}, content_type="application/json"
    )
    assert started.status_code == 202
    state = admin_client.get(f"/api/v1/reviews/tasks/{started.json()['task']}/").json()
    assert state["status"] == "SUCCESS" and state["review"] == Review.objects.get().pk
    review = Review.objects.get()
    listed = admin_client.get("/api/v1/reviews/").json()["results"]
    assert listed[0]["month"] == month and len(listed[0]["downloads"]) == len(review.files)
    download = admin_client.get(listed[0]["downloads"][0])
    assert download.status_code == 200 and download["Digest"].startswith("sha-256=")
    index = next(i for i, r in enumerate(review.recommendations) if r["verdict"] == "grow")
    page = admin_client.get(f"/reviews/{review.pk}/").content.decode()
    assert "Request this change" in page and "acme/ops" in page
    done = admin_client.post(f"/reviews/{review.pk}/", {"index": index})
    change = ChangeRequest.objects.get()
    assert (
        done.status_code == 302 and change.changes[0]["guarantee"] == 40 and "governance review acme" in change.reason
    )
    review.refresh_from_db()
    assert review.recommendations[index]["change_request"] == change.pk  # the review records what was accepted
    assert admin_client.post(
        f"/api/v1/reviews/{review.pk}/accept/", {"index": index}, content_type="application/json"
    ).json() == {"change_request": change.pk}
    assert "Reviews" in admin_client.get("/reviews/").content.decode()


def test_beat_builds_last_months_review_of_every_organisation_and_department(org, settings, tmp_path):
    from accounting.tasks import build_reviews

    built = build_reviews("2026-10")
    assert sorted(Review.objects.values_list("unit__path", flat=True)) == ["acme", "acme/ops", "acme/research"]
    assert len(built) == 3 and all(r.summary["units"] == 0 for r in Review.objects.all())  # no data: says so, no crash


def test_the_docs_list_exactly_the_columns_each_review_csv_has():
    """Issue #27.8: units.csv had 26 columns while the README listed 28 (the list is now in the docs)."""
    import re
    from pathlib import Path

    from accounting.services.review_tables import COLUMNS

    readme = (Path(__file__).resolve().parents[2] / "docs" / "concepts" / "review.md").read_text()
    listed = dict(re.findall(r"^\| `([a-z_]+)\.csv` \| ([^|]+) \|", readme, flags=re.M))
    assert listed, "docs/concepts/review.md has no table of the review's CSV files"
    for table, columns in listed.items():
        assert [c.strip() for c in columns.split(",")] == COLUMNS[table], table
