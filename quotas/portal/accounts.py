"""Signing in and setting passwords: Django's own views, with every password set audited and the
self-service reset offered only where mail can deliver its link.

A person added without single sign-on sets their password through the one-time link the admin is shown
(``quotas.services.people``); a person who forgot theirs asks for a new link by mail — only when mail is
configured (``ALLOT_MAIL_BACKEND``): otherwise the link would go where the mail goes, the server's log, and
anyone who can read it could take over any account with an address. Every password set (through a link or
by changing it) writes an audit row, readable by platform admins."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth
from django.http import HttpResponse
from django.urls import path

from quotas.services.audit import audit_event, audit_write


def _audited(action: str, user: Any, how: str) -> None:
    audit_write(
        [
            audit_event(
                actor=user, action=action, obj_type="user", obj_id=user.pk, obj_repr=user.get_username(),
                before=None, after={"how": how}, reason=how,
            )
        ]
    )  # fmt: skip


class PasswordSetByLink(auth.PasswordResetConfirmView):
    """The one-time link (a new person's, or a reset's): the password set is audited."""

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        _audited("password_set", form.user, "set through a one-time link")
        return response


class PasswordChanged(auth.PasswordChangeView):
    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        _audited("password_set", form.user, "changed by its owner")
        return response


def account_urls() -> list[Any]:
    """``/accounts/``: sign in and out, change a password, set one through a link; ask for a reset link by
    mail only when mail is configured."""
    found = [
        path("login/", auth.LoginView.as_view(), name="login"),
        path("logout/", auth.LogoutView.as_view(), name="logout"),
        path("password_change/", PasswordChanged.as_view(), name="password_change"),
        path("password_change/done/", auth.PasswordChangeDoneView.as_view(), name="password_change_done"),
        path("reset/<uidb64>/<token>/", PasswordSetByLink.as_view(), name="password_reset_confirm"),
        path("reset/done/", auth.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
    ]
    if settings.ALLOT_MAIL_CONFIGURED:
        found += [
            path("password_reset/", auth.PasswordResetView.as_view(), name="password_reset"),
            path("password_reset/done/", auth.PasswordResetDoneView.as_view(), name="password_reset_done"),
        ]
    return found
