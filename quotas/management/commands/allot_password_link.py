from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.access import NotAllowedError
from quotas.errors import InputError
from quotas.management.acting import acting_admin, add_actor_arguments
from quotas.services.people import password_link_issue


class Command(BaseCommand):
    help = (
        "Print a new one-time link for a person to set their password (where mail cannot deliver a reset); "
        "audited. Give it to them yourself: it is written nowhere else."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="whose password is to be set")
        add_actor_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        admin = acting_admin(options["admin"])
        try:
            link = password_link_issue(actor=admin, reason=options["reason"], username=options["username"])
        except (NotAllowedError, InputError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(link)
