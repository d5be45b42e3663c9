from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.access import NotAllowedError
from quotas.errors import InputError
from quotas.management.acting import acting_admin, add_actor_arguments
from quotas.services.signin import signin_unlock


class Command(BaseCommand):
    help = "Lift a sign-in lockout (django-axes) for a username, audited with a reason."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="the username whose sign-in is paused")
        parser.add_argument("--ip", default="", help="only the lockout from this address")
        add_actor_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        admin = acting_admin(options["admin"])
        try:
            removed = signin_unlock(
                actor=admin, reason=options["reason"], username=options["username"], ip_address=options["ip"]
            )
        except (NotAllowedError, InputError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"lifted {removed} lockout record(s) of {options['username']}")
