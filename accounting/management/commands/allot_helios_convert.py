"""Convert the Helios "Earth" per-VC minute series into Allot's replay format (gzip).

manage.py allot_helios_convert PATH/Earth_vcs --out accounting/demo_data/helios-earth-2020-05.csv.gz
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from accounting.policy.helios import HEADER, helios_to_replay


class Command(BaseCommand):
    help = "Convert Helios Earth_vcs/<vc>/cluster_sequence_vc.csv files into one replay file (gzip)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("source", type=Path, help="the Earth_vcs folder of the Helios artifact")
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--flavor", default="v100")
        parser.add_argument("--gap", action="append", default=["2020-05-10"], help="a day to leave out (a gap)")

    def handle(self, *args: Any, source: Path, out: Path, flavor: str, gap: list[str], **options: Any) -> None:
        files = sorted(source.glob("*/cluster_sequence_vc.csv"))
        if not files:
            raise CommandError(f"{source}: no <vc>/cluster_sequence_vc.csv files")
        lines = 0
        with gzip.open(out, "wt", compresslevel=9, newline="") as target:
            target.write(HEADER + "\n")
            for path in files:
                with path.open(newline="") as f:
                    for line in helios_to_replay(
                        csv.DictReader(f), vc=path.parent.name, flavor=flavor, gaps=frozenset(gap)
                    ):
                        target.write(line + "\n")
                        lines += 1
        self.stdout.write(f"{out}: {lines} rows from {len(files)} VCs (left out: {', '.join(gap)})")
