from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounting.services.review import last_month
from accounting.services.review_formats import FORMATS, review_files
from accounting.services.review_tables import review_data
from quotas.models import OrgUnit


class Command(BaseCommand):
    help = (
        "Write the monthly governance review of an organisation or department: "
        "allot_review --unit acme/research --month 2020-05 --format pdf,xlsx,csv --out DIR"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--unit", required=True, help="The unit's path, e.g. acme/research.")
        parser.add_argument("--month", default="", help="YYYY-MM (UTC); default: last month.")
        parser.add_argument("--format", default=",".join(FORMATS), help=f"Comma-separated: {', '.join(FORMATS)}.")
        parser.add_argument("--out", default=".", help="The folder to write into (created if missing).")

    def handle(self, *args: Any, **options: Any) -> None:
        unit = OrgUnit.objects.filter(path=options["unit"], archived_at__isnull=True).first()
        if unit is None:
            roots = ", ".join(
                OrgUnit.objects.filter(depth__lte=1, archived_at__isnull=True).values_list("path", flat=True)
            )
            raise CommandError(
                f"--unit {options['unit']!r}: no such active unit; organisations and departments: {roots}"
            )
        month = options["month"] or last_month()
        formats = tuple(f.strip() for f in options["format"].split(",") if f.strip())
        started = time.monotonic()
        self.stdout.write(f"reading {unit.path} for {month} …")
        try:
            data = review_data(unit, month)
            self.stdout.write(f"writing {', '.join(formats)} …")
            written = review_files(data, Path(options["out"]), formats)
        except ValueError as exc:
            raise CommandError(f"{exc}: --month YYYY-MM, --format {','.join(FORMATS)}") from exc
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        for path in written:
            self.stdout.write(f"  {path}")
        verdicts = ", ".join(f"{n} {v}" for v, n in data.summary["verdicts"].items()) or "no guarantees with usage"
        self.stdout.write(f"{len(written)} files in {time.monotonic() - started:.1f} s; recommendations: {verdicts}")
