from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from quotas.demo import DEMO_PASSWORD, demo_users, load_demo
from quotas.policy.invariants import validate_tree
from quotas.selectors import org_snapshot


class Command(BaseCommand):
    help = "Load the demo organisation (idempotent) and print the demo logins."

    def handle(self, *args: Any, **options: Any) -> None:
        loaded = load_demo()
        snapshot = org_snapshot()
        problems = validate_tree(snapshot)
        self.stdout.write(
            ("Loaded" if loaded else "Found") + f" the demo organisation: {len(snapshot.units)} units, "
            f"{len(snapshot.quotas)} quotas, {len(problems)} invariant violations."
        )
        self.stdout.write(f"Demo logins (password '{DEMO_PASSWORD}' for all): " + ", ".join(demo_users()))
