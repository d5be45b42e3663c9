from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.access import NotAllowedError
from quotas.errors import InputError
from quotas.services.people import password_link_issue


class Command(BaseCommand):
    help = (
        "Print a new one-time link for a person to set their password (where mail cannot deliver a reset); "
        "audited. Give it to them yourself: it is written nowhere else."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="whose password is to be set")
        parser.add_argument("--reason", required=True, help="why (kept in the audit trail)")
        parser.add_argument("--as", dest="admin", required=True, help="the platform admin doing it")

    def handle(self, *args: Any, **options: Any) -> None:
        admin = User.objects.filter(username=options["admin"]).first()
        if admin is None:
            raise CommandError(f"no user {options['admin']!r}: --as names a platform admin (a staff user)")
        try:
            link = password_link_issue(actor=admin, reason=options["reason"], username=options["username"])
        except (NotAllowedError, InputError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(link)
