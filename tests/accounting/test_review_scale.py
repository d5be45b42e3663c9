"""A large review's PDF is a summary plus one section per department (issue #43 item 5): the sections
add up to the units table, the PDF names what it leaves to the CSV and XLSX, and a small review still
lists every row. The size is measured by bench/review.py (1,000 teams); here the threshold is lowered."""

from __future__ import annotations

import subprocess

import pytest

from accounting.services import review_sections
from accounting.services.review_formats import write_pdf
from accounting.services.review_tables import review_data
from tests.accounting.test_review import PDF, month  # noqa: F401

pytestmark = pytest.mark.django_db


def test_the_sections_add_up_to_the_units_table(org, month):  # noqa: F811
    data = review_data(org.acme, month)
    found = review_sections.sections(data)
    assert {s["section"] for s in found} == {"acme/ops", "acme/research"}  # acme's departments
    for name in ("allocated_h", "borrowed_h", "pending_h"):
        assert sum(s[name] for s in found) == pytest.approx(sum(u[name] for u in data.tables["units"]))
    assert sum(s["units"] for s in found) == len(data.tables["units"])
    research = next(s for s in found if s["section"] == "acme/research")
    assert research["units"] == 2 and research["guarantee"] == 30 + 20  # nlp and vision


@PDF
def test_a_large_review_pdf_shows_departments_and_says_where_the_rows_are(org, month, tmp_path, monkeypatch):  # noqa: F811
    data = review_data(org.acme, month)

    def text(path):
        out = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True, check=True).stdout
        return " ".join(out.split())

    full = text(write_pdf(data, tmp_path / "full.pdf"))
    assert "By department" not in full and "acme/research/nlp" in full
    monkeypatch.setattr(review_sections, "FULL_ROWS", 2)
    compact = text(write_pdf(data, tmp_path / "compact.pdf"))
    assert "By department — 3 unit-flavor rows in 2 sections; every row in units.csv and the XLSX" in compact
    # research: nlp and vision, 2 units, guarantees 30 + 20, 720 + 18,000 allocated, 3,600 borrowed, 1,440 queued
    assert "west/a100 2 50 18,720 3,600 1,440" in compact and "1 grow, 1 shrink" in compact
    assert "Alloc h Borrowed h Lent h" not in compact  # the full units table is left to the CSV and XLSX
