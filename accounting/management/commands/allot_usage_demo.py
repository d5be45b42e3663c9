from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand

from accounting.demo import ATTRIBUTION, load_usage_demo


class Command(BaseCommand):
    help = "Load a real month of usage (Helios Earth, May 2020) into the demo organisation (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        self.stdout.write("loading a month of real usage (691,200 team-minutes; the first time takes a minute) …")
        run = load_usage_demo()
        if run is None:
            self.stdout.write("Found the demo's month of usage.")
            return
        self.stdout.write(
            f"Loaded {run.counts['rows']:,} team-minutes of {run.counts['units']} teams "
            f"({run.counts['gap_minutes']:,} gap minutes) in {time.monotonic() - started:.0f} s. {ATTRIBUTION}."
        )
