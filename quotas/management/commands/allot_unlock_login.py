from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.access import NotAllowedError
from quotas.errors import InputError
from quotas.services.signin import signin_unlock


class Command(BaseCommand):
    help = "Lift a sign-in lockout (django-axes) for a username, audited with a reason."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="the username whose sign-in is paused")
        parser.add_argument("--reason", required=True, help="why (kept in the audit trail)")
        parser.add_argument("--ip", default="", help="only the lockout from this address")
        parser.add_argument("--as", dest="admin", required=True, help="the platform admin doing it")

    def handle(self, *args: Any, **options: Any) -> None:
        admin = User.objects.filter(username=options["admin"]).first()
        if admin is None:
            raise CommandError(f"no user {options['admin']!r}: --as names a platform admin (a staff user)")
        try:
            removed = signin_unlock(
                actor=admin, reason=options["reason"], username=options["username"], ip_address=options["ip"]
            )
        except (NotAllowedError, InputError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"lifted {removed} lockout record(s) of {options['username']}")
