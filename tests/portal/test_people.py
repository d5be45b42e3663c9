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
