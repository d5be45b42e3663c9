from __future__ import annotations

import time
from typing import Any

from django.core import mail
from django.core.management.base import BaseCommand
from django.test.utils import override_settings

from accounting.demo import ATTRIBUTION, LEADS, ROWS, load_usage_demo


class Command(BaseCommand):
    help = "Load a real month of usage (Helios Earth, May 2020) into the demo organisation (idempotent)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--review",
            choices=("now", "later", "only"),
            default="now",
            help="build the month's governance review now (default), later (leave it to a second run with "
            "--review only: ./dev run does that beside the server, so the portal opens sooner), or only that",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        if options["review"] == "only":
            with override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"):
                self.review()
            self.stdout.write(f"The month's review is on the Reviews page ({time.monotonic() - started:.0f} s).")
            return
        self.stdout.write(f"loading a month of real usage ({ROWS:,} team-minutes, once) …")
        shown = [0]

        def progress(rows: int) -> None:
            if rows - shown[0] >= 100_000:
                shown[0] = rows
                self.stdout.write(
                    f"  {rows:,} of {ROWS:,} team-minutes ({rows / ROWS:.0%}), {time.monotonic() - started:.0f} s"
                )

        # the findings and the review mail the demo's leads: kept in memory, not printed over the output
        with override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"):
            mail.outbox = []
            run = load_usage_demo(progress)
            self.inference()  # before the research's findings: they are detected over both
            self.research()  # before the other findings: its detection's window is today's
            self.fleet()
            if run is None:
                self.stdout.write("Found the demo's month of usage.")
                self.logins()
                return
            self.stdout.write(
                f"Loaded {run.counts['rows']:,} team-minutes of {run.counts['units']} teams "
                f"({run.counts['gap_minutes']:,} gap minutes), rolled up, in {time.monotonic() - started:.0f} s. "
                f"{ATTRIBUTION}."
            )
            self.findings()
            if options["review"] == "now":
                self.review()
            sent = len(mail.outbox)
        self.stdout.write(
            f"Done in {time.monotonic() - started:.0f} s ({sent} mails to the demo's leads kept in memory). To see "
            f"the month, its findings, plan and review, sign in as head-earth (Earth's head) or "
            f"{', '.join(sorted(LEADS.values()))} (password 'allot-demo')."
        )
        self.logins()

    def logins(self) -> None:
        from quotas.demo import DEMO_PASSWORD, demo_users

        self.stdout.write(f"Demo logins (password '{DEMO_PASSWORD}' for all): " + ", ".join(demo_users()))

    def research(self) -> None:
        """The research department's recent month (synthetic): what lead-nlp and head-research meet."""
        from django.utils import timezone

        from accounting.demo_research import load_research_demo
        from accounting.services.budgets import budgets_evaluate
        from accounting.services.findings import findings_detect

        if load_research_demo():
            budgets_evaluate()
            found = findings_detect(now=timezone.now()).found
            self.stdout.write(
                f"Loaded the research department's recent month (synthetic), a budget and a pending change request: "
                f"{found or 'no findings'}; sign in as lead-nlp or head-research"
            )

    def inference(self) -> None:
        """The inference team on MIG slices of an H100 flavor (a synthetic recent month, in GPU-equivalents)."""
        from accounting.demo_inference import load_inference_demo

        if load_inference_demo():
            self.stdout.write(
                "Loaded the inference team's recent month on H100 MIG slices (synthetic, in GPU-equivalents); "
                "sign in as lead-inference"
            )

    def fleet(self) -> None:
        """The cluster of Example 8.2 (a synthetic month): its pool table and mismatch findings."""
        from accounting.demo_fleet import fleet_demo_findings, load_fleet_demo

        if load_fleet_demo():
            found = fleet_demo_findings()
            self.stdout.write(
                f"Loaded Example 8.2's cluster (synthetic October 2026): {found or 'no findings'}; "
                "see /pools/?month=2026-10"
            )

    def findings_and_review(self) -> None:
        self.findings()
        self.review()

    def findings(self) -> None:
        """The month's findings (the detectors over all of May), so the demo's Findings page shows
        what the real month says."""
        from datetime import UTC, datetime

        from accounting.policy.findings import Thresholds
        from accounting.services.findings import findings_detect

        june = datetime(2020, 6, 1, tzinfo=UTC)
        found = findings_detect(end=june, now=june, th=Thresholds(idle_window_days=31, reservation_window_days=31))
        self.stdout.write(f"Findings for May 2020: {found.found or 'none'}")

    def review(self) -> None:
        """Last month's governance review of research and May 2020's of Earth (all three formats), as beat
        builds one on the 1st."""
        from accounting.demo_research import research_window
        from accounting.models import Review
        from quotas.models import OrgUnit

        research, last_month = OrgUnit.objects.get(path="acme/research"), research_window()[0].strftime("%Y-%m")
        if not Review.objects.filter(unit=research, month=last_month).exists():
            self.build(research, last_month)
        earth = OrgUnit.objects.get(path="acme/earth")
        if Review.objects.filter(unit=earth, month="2020-05").exists():
            return
        self.build(earth, "2020-05")

    def build(self, unit: Any, month: str) -> None:
        from accounting.services.review import review_generate

        try:
            review = review_generate(unit=unit, month=month)
        except RuntimeError as exc:  # no pango for the PDF on this machine: the other formats still come
            self.stdout.write(f"{exc}; writing the review as CSV and XLSX only")
            review = review_generate(unit=unit, month=month, formats=("csv", "xlsx"))
        self.stdout.write(f"Governance review of {unit.path} for {month}: {review.summary['verdicts']}")
