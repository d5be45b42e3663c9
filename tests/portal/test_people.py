"""Issue #27.9: where accounts come from. With single sign-on an account is made at first sign-in;
without it a platform admin adds a person in the portal, who sets their own password through a
one-time link (nobody else ever knows it). Audited, readable by platform admins only."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client

from quotas.models import AuditEvent
from tests.portal.test_pages import signed_in

pytestmark = pytest.mark.django_db


def test_an_admin_adds_a_person_who_sets_their_own_password(demo, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    admin = signed_in("admin")
    with django_capture_on_commit_callbacks(execute=True):
        page = admin.post(
            "/setup/",
            {"action": "person", "username": "jdoe", "email": "jdoe@example.org", "reason": "joins nlp"},
            follow=True,
        ).content.decode()
    found = re.search(r"(http://[^ <]+/accounts/reset/[^ <]+/)", page)
    assert found, "the page shows the one-time link"
    link = found.group(1)
    person = User.objects.get(username="jdoe")
    assert not person.has_usable_password() and not person.is_staff
    assert [m.to for m in mail.outbox] == [["jdoe@example.org"]] and link in mail.outbox[0].body
    event = AuditEvent.objects.get(action="person_add")
    assert event.reason == "joins nlp" and event.after == {"email": "jdoe@example.org", "platform_admin": False}

    browser = Client()
    form = browser.get(link.split("8000", 1)[-1], follow=True)  # Django swaps the token for a session mark
    assert form.status_code == 200 and "new_password1" in form.content.decode()
    done = browser.post(
        form.redirect_chain[-1][0], {"new_password1": "a-long-pass-phrase", "new_password2": "a-long-pass-phrase"}
    )
    assert done.status_code == 302
    set_by_link = AuditEvent.objects.get(action="password_set")  # issue #42: setting a password is audited
    assert (set_by_link.actor_name, set_by_link.object_repr) == ("jdoe", "jdoe")
    assert set_by_link.after == {"how": "set through a one-time link"}
    signs_in = Client().post("/accounts/login/", {"username": "jdoe", "password": "a-long-pass-phrase"})
    assert signs_in.status_code == 302
    assert browser.get(link.split("8000", 1)[-1], follow=True).context["validlink"] is False  # one use

    twice = admin.post("/setup/", {"action": "person", "username": "JDOE", "reason": "again"}, follow=True)
    assert "has an account already" in twice.content.decode()
    bad = admin.post("/setup/", {"action": "person", "username": "j doe!", "email": "nope", "reason": "x"}, follow=True)
    assert "is not a username" in bad.content.decode() and User.objects.filter(username="j doe!").count() == 0


def test_only_platform_admins_add_people_and_read_that_it_happened(demo):
    signed_in("admin").post("/setup/", {"action": "person", "username": "amy", "reason": "new"})
    lead = signed_in("head-research")
    assert lead.post("/setup/", {"action": "person", "username": "eve", "reason": "x"}).status_code == 403
    assert not User.objects.filter(username="eve").exists()
    listed = lead.get("/api/v1/audit/", {"action": "person_add"}).json()
    assert listed["count"] == 0  # an address is personal data: admins only
    assert signed_in("admin").get("/api/v1/audit/", {"action": "person_add"}).json()["count"] == 1


def test_no_one_time_link_is_written_to_a_log_or_a_cookie_and_no_reset_is_offered_without_mail(demo, caplog, settings):
    """Issue #42: with debug off the console mail backend stayed the default, so person_add's link went to
    the web server's log; /accounts/password_reset/ let anyone have a fresh link for any account with an
    address; the link shown to the admin travelled in the signed (not encrypted) messages cookie."""
    import os
    import subprocess
    import sys

    from django.core.mail import send_mail

    env = {k: v for k, v in os.environ.items() if k not in ("ALLOT_MAIL_BACKEND", "ALLOT_DEBUG")}
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.EMAIL_BACKEND, s.ALLOT_MAIL_CONFIGURED)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], env={**env, "DJANGO_SETTINGS_MODULE": "config.settings", "ALLOT_SECRET_KEY": "t"},
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert shown == ["quotas.mail.UnsentBackend", "False"]  # the default with debug off: nothing sent, nothing written
    settings.EMAIL_BACKEND = "quotas.mail.UnsentBackend"  # the test runner swaps in its own
    assert Client().get("/accounts/password_reset/").status_code == 404
    with caplog.at_level("WARNING", logger="allot.mail"):
        assert send_mail("[Allot] your account", "the link: SECRET-TOKEN", None, ["jdoe@example.org"]) == 0
    assert "mail not sent" in caplog.text and "jdoe@example.org" in caplog.text and "SECRET-TOKEN" not in caplog.text
    admin = signed_in("admin")
    added = admin.post("/setup/", {"action": "person", "username": "kim", "reason": "joins"})
    assert not any("accounts/reset" in morsel.value for morsel in added.cookies.values())
    assert "/accounts/reset/" in admin.get("/setup/").content.decode()  # shown once, from the session


def test_a_password_change_is_audited(demo):
    person = User.objects.create_user("lou", password="first-long-phrase")
    client = Client()
    client.force_login(person)
    changed = client.post(
        "/accounts/password_change/",
        {
            "old_password": "first-long-phrase",
            "new_password1": "second-long-phrase",
            "new_password2": "second-long-phrase",
        },
    )
    assert changed.status_code == 302
    assert AuditEvent.objects.get(action="password_set").after == {"how": "changed by its owner"}


def test_a_platform_admin_issues_a_new_link_by_command_audited(demo):
    import io

    from django.core.management import CommandError, call_command

    out = io.StringIO()
    call_command("allot_password_link", "lead-nlp", "--reason", "forgot it", "--as", "admin", stdout=out)
    assert "/accounts/reset/" in out.getvalue()
    event = AuditEvent.objects.get(action="password_link_issue")
    assert (event.object_repr, event.reason, event.after) == ("lead-nlp", "forgot it", None)
    with pytest.raises(CommandError, match="only a platform admin"):
        call_command("allot_password_link", "admin", "--reason", "r", "--as", "lead-nlp", stdout=io.StringIO())


def test_commands_run_by_hand_name_who_acts(demo):
    import io

    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--as names a platform admin"):
        call_command("allot_unlock_login", "lead-nlp", "--reason", "r", "--as", "nobody", stdout=io.StringIO())
    out = io.StringIO()
    call_command("allot_unlock_login", "lead-nlp", "--reason", "locked out", "--as", "admin", stdout=out)
    assert out.getvalue().startswith("lifted 0 lockout record(s) of lead-nlp")


def test_the_first_platform_admin_of_a_new_instance_is_made_by_hand_once(db):
    """Issue #42: no step said how the first platform admin gets an account."""
    import io

    from django.core.management import CommandError, call_command

    out = io.StringIO()
    call_command("allot_first_admin", "ops-lead", "--email", "ops@example.org", stdout=out)
    admin = User.objects.get(username="ops-lead")
    assert admin.is_superuser and admin.is_staff and not admin.has_usable_password()
    found = re.search(r"(http://\S+/accounts/reset/\S+/)", out.getvalue())
    assert found, out.getvalue()
    link = found.group(1)
    form = Client().get(link.split("8000", 1)[-1], follow=True)
    assert "new_password1" in form.content.decode()  # the link sets the password
    event = AuditEvent.objects.get(action="person_add")
    assert event.actor_name == "system" and event.after == {"email": "ops@example.org", "platform_admin": True}
    with pytest.raises(CommandError, match=r"has a platform admin already \(ops-lead\)"):
        call_command("allot_first_admin", "second", stdout=io.StringIO())
    assert not User.objects.filter(username="second").exists()
