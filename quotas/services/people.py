"""People: where Allot's user accounts come from.

With single sign-on (``ALLOT_OIDC_ENABLED``) an account is made the first time someone signs in
through the identity provider — nobody adds people by hand. Without it a platform admin adds a
person here (the portal's Set up page, or the admin site): the account has no password until the
person sets one through the one-time link the admin is shown (and that is mailed to them when mail is
configured), so no admin ever knows it. Leads and members are then given on the unit pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from quotas.access import NotAllowedError, Viewer, is_platform_admin
from quotas.errors import InputError
from quotas.services.audit import audit_event, audit_write, require_reason


@dataclass(frozen=True)
class NewPerson:
    username: str
    email: str
    set_password_link: str
    """One use; valid for PASSWORD_RESET_TIMEOUT (three days by default)."""


def set_password_link(user: object) -> str:
    uid = urlsafe_base64_encode(force_bytes(user.pk))  # type: ignore[attr-defined]
    token = default_token_generator.make_token(user)  # type: ignore[arg-type]
    return f"{settings.ALLOT_PORTAL_URL.rstrip('/')}/accounts/reset/{uid}/{token}/"


@transaction.atomic
def person_add(
    *, actor: Viewer, reason: str, username: str, email: str = "", platform_admin: bool = False
) -> NewPerson:
    """Add a person (platform admins only): an account without a usable password and a one-time link
    to set one, mailed to ``email`` when given. Audited (readable by platform admins only: it holds
    an address). InputError naming the field for a bad or taken username or a bad address."""
    if not is_platform_admin(actor):
        raise NotAllowedError("only a platform admin adds people (with single sign-on they are added on first sign-in)")
    return _person_add(actor, reason, username, email, platform_admin)


@transaction.atomic
def first_admin_add(*, reason: str, username: str, email: str = "") -> NewPerson:
    """The first platform admin of a new instance, made by hand (``manage.py allot_first_admin``): a
    person_add with no one to act for it, audited as "system". Refused once any platform admin
    exists — from then on, admins add people (Set up) and issue links (``allot_password_link``)."""
    model = get_user_model()
    admins = list(
        model.objects.select_for_update().filter(is_superuser=True, is_active=True).values_list("username", flat=True)
    )
    if admins:
        raise NotAllowedError(
            f"Allot has a platform admin already ({', '.join(sorted(admins)[:3])}): an admin adds people from "
            "Set up, or issues a password link with allot_password_link"
        )
    return _person_add(None, reason, username, email, True)


def _person_add(actor: Viewer, reason: str, username: str, email: str, platform_admin: bool) -> NewPerson:
    reason = require_reason(reason)
    username, email = username.strip(), email.strip()
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError as exc:
        raise InputError("username", f"{username!r} is not a username", "letters, digits and @.+-_ only") from exc
    if not username or len(username) > 150:
        raise InputError("username", "a username is required (at most 150 characters)", "e.g. jdoe")
    if email:
        try:
            validate_email(email)
        except ValidationError as exc:
            raise InputError("email", f"{email!r} is not an email address", "e.g. jdoe@example.org") from exc
    model = get_user_model()
    if model.objects.filter(username__iexact=username).exists():
        raise InputError("username", f"{username} has an account already", "make them a lead or member of a unit")
    user = model.objects.create_user(username=username, email=email, password=None)
    if platform_admin:
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    link = set_password_link(user)
    audit_write(
        [
            audit_event(
                actor=actor, action="person_add", obj_type="user", obj_id=user.pk, obj_repr=username, before=None,
                after={"email": email, "platform_admin": platform_admin}, reason=reason,
            )
        ]
    )  # fmt: skip
    if email:
        text = (
            f"An Allot account was made for you ({username}). Set your password here (the link works once):\n\n{link}\n"
        )
        transaction.on_commit(lambda: send_mail("[Allot] your account", text, None, [email], fail_silently=True))
    return NewPerson(username, email, link)


def password_link_issue(*, actor: Viewer, reason: str, username: str) -> str:
    """A new one-time link for ``username`` to set a password (platform admins only; audited, the link
    itself is not): for a person who forgot theirs where mail cannot deliver a reset."""
    if not is_platform_admin(actor):
        raise NotAllowedError("only a platform admin issues a password link")
    reason = require_reason(reason)
    user = get_user_model().objects.filter(username=username.strip(), is_active=True).first()
    if user is None:
        raise InputError("username", f"no active account {username!r}", "give the username as it signs in")
    audit_write(
        [
            audit_event(
                actor=actor, action="password_link_issue", obj_type="user", obj_id=user.pk,
                obj_repr=user.get_username(), before=None, after=None, reason=reason,
            )
        ]
    )  # fmt: skip
    return set_password_link(user)
