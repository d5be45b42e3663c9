"""Benchmark the monthly governance review on PostgreSQL.

    python bench/review.py

The month of bench/accounting.py (hourly rollups for 1,000 teams × 4 GPU types, in its own
database allot_bench), then the review of the whole organisation: the tables, then each format.
Prints the figures; the LAST line is key=value: review_data_s, review_csv_s, review_xlsx_s,
review_pdf_s, review_all_s, review_peak_mb (the process's peak resident memory), rows, pdf_pages.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _month_bench() -> Any:
    """bench/accounting.py's month and organisation (loaded by path: its name is the app's)."""
    spec = importlib.util.spec_from_file_location("bench_accounting", ROOT / "bench" / "accounting.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MONTH_BENCH = _month_bench()
END, FILL, MONTH, TYPES, UNITS = (getattr(MONTH_BENCH, n) for n in ("END", "FILL", "MONTH", "TYPES", "UNITS"))
database_url, organisation, setup_database = (
    MONTH_BENCH.database_url,
    MONTH_BENCH.organisation,
    MONTH_BENCH.setup_database,
)


def main() -> None:
    url = database_url()
    os.environ.update(
        {"DATABASE_URL": url, "ALLOT_SECRET_KEY": "bench-only", "DJANGO_SETTINGS_MODULE": "config.settings"}
    )
    setup_database(url)

    import django

    django.setup()
    from django.db import connection

    from accounting.services.review import review_data, write_csv, write_pdf, write_xlsx
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
