"""Benchmark the monthly governance review on PostgreSQL.

    python bench/review.py

The month of bench/accounting.py (hourly rollups for 1,000 teams × 4 GPU types, in its own
database allot_bench), then the review of the whole organisation: the tables, then each format.
Prints the figures; the LAST line is key=value: review_data_s, review_csv_s, review_xlsx_s,
review_pdf_s, review_all_s, review_peak_mb (the process's peak resident memory), rows, pdf_pages.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.accounting import END, FILL, MONTH, TYPES, UNITS, organisation  # noqa: E402
from bench.benchdb import database_url, setup_database  # noqa: E402


def main() -> None:
    url = database_url("review")
    setup_database(url)

    import django

    django.setup()
    from django.db import connection

    from accounting.services.review_formats import write_csv, write_pdf, write_xlsx
    from accounting.services.review_tables import review_data
    from quotas.models import OrgUnit

    organisation()
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"start": MONTH, "end": END})
        cursor.execute("ANALYZE accounting_usagehour")
    print(f"a month of rollups for {UNITS} teams × {len(TYPES)} GPU types")
    out = Path(tempfile.mkdtemp(prefix="allot-bench-review-"))
    acme = OrgUnit.objects.get(path="acme")
    started = time.perf_counter()
    data = review_data(acme, MONTH.strftime("%Y-%m"))
    data_s = time.perf_counter() - started
    rows, recs = len(data.tables["units"]), len(data.tables["recommendations"])
    print(f"tables: {rows:,} unit-flavor rows, {recs:,} recommendations in {data_s:.1f} s")
    timings = {}
    for name, write in (
        ("csv", lambda: write_csv(data, out / "csv")),
        ("xlsx", lambda: write_xlsx(data, out / "r.xlsx")),
        ("pdf", lambda: write_pdf(data, out / "r.pdf")),
    ):
        started = time.perf_counter()
        write()
        timings[name] = time.perf_counter() - started
        print(f"{name}: {timings[name]:.1f} s")
    pages = 0
    info = subprocess.run(["pdfinfo", str(out / "r.pdf")], capture_output=True, text=True, check=False).stdout
    for line in info.splitlines():
        if line.startswith("Pages:"):
            pages = int(line.split()[1])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = data_s + sum(timings.values())
    print(
        f"review_data_s={data_s:.1f} review_csv_s={timings['csv']:.1f} review_xlsx_s={timings['xlsx']:.1f} "
        f"review_pdf_s={timings['pdf']:.1f} review_all_s={total:.1f} review_peak_mb={peak:.0f} "
        f"rows={len(data.tables['units'])} pdf_pages={pages}"
    )


if __name__ == "__main__":
    main()
