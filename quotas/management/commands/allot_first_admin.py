"""The first platform admin of a new instance: ``manage.py allot_first_admin USERNAME``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.access import NotAllowedError
from quotas.errors import InputError
from quotas.services.people import first_admin_add


class Command(BaseCommand):
    help = (
        "Make the first platform admin of a new instance and print a one-time link to set their password "
        "(no password is typed into a shell); audited as 'system'. Refused once any platform admin exists."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="the admin's username, e.g. jdoe")
        parser.add_argument("--email", default="", help="their address (mailed the link too where mail is set up)")
        parser.add_argument(
            "--reason", default="the first platform admin of this instance", help="kept in the audit trail"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            made = first_admin_add(reason=options["reason"], username=options["username"], email=options["email"])
        except (NotAllowedError, InputError) as exc:
            raise CommandError(str(exc)) from exc
        again = f"allot_password_link {made.username} --as {made.username} --reason …"
        self.stdout.write(
            f"{made.username} is a platform admin. Open this link once to set the password (it works once, for "
            f"three days; `{again}` issues another):\n{made.set_password_link}"
        )
