"""What the commands a platform admin runs by hand share: who is acting (``--as``) and why (``--reason``)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core.management.base import CommandError, CommandParser


def add_actor_arguments(parser: CommandParser) -> None:
    parser.add_argument("--reason", required=True, help="why (kept in the audit trail)")
    parser.add_argument("--as", dest="admin", required=True, help="the platform admin doing it")


def acting_admin(username: str) -> User:
    admin = User.objects.filter(username=username).first()
    if admin is None:
        raise CommandError(f"no user {username!r}: --as names a platform admin (a staff user)")
    return admin
