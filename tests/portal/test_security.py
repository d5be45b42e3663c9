"""Issue #13.6: sign-in throttling (django-axes, audited, unlocked by an admin), a Content-Security-Policy
with nothing from another origin, and production settings that pass `check --deploy`."""

import os
import secrets
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from quotas.models import AuditEvent

pytestmark = pytest.mark.django_db
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_production_settings_pass_the_deployment_checks_with_no_warning():
    env = {
        **os.environ,
        "ALLOT_DEBUG": "false",
        "ALLOT_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    env.pop("ALLOT_HTTPS", None)  # the production default
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "no issues" in done.stdout, done.stdout + done.stderr
    probe = "import django; django.setup(); from django.conf import settings as s; " + (
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS)"
    )
    shown = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True)
    assert shown.stdout.split() == ["True", "True", "True", "31536000"], shown.stderr


@pytest.mark.parametrize("url", ["/accounts/login/", "/api/redoc/", "/api/docs/", "/"])
def test_every_page_forbids_other_origins_and_inline_scripts(demo, url):
    client = Client()
    client.force_login(User.objects.get(username="viewer"))
    page = client.get(url)
    assert page.status_code == 200, url
    policy = dict(part.strip().split(" ", 1) for part in page["Content-Security-Policy"].split(";") if part.strip())
    assert policy["script-src"] == "'self'" and policy["default-src"] == "'self'"
    assert all("http" not in value for value in policy.values()), policy  # no other origin anywhere
    body = page.content.decode()
    assert "fonts.googleapis.com" not in body and "<script>" not in body  # ReDoc's fonts and inline code gone


def test_repeated_failed_sign_ins_lock_out_until_an_admin_lifts_it_all_audited(org):
    User.objects.create_user("lead-nlp", password="the-right-one")
    client = Client()
    for _ in range(4):
        failed = client.post("/accounts/login/", {"username": "lead-nlp", "password": "wrong"})
        assert failed.status_code == 200  # the form again, with its message
    fifth = client.post("/accounts/login/", {"username": "lead-nlp", "password": "wrong"})
    assert fifth.status_code == 429 and "After 5 failed attempts" in fifth.content.decode()
    locked = client.post("/accounts/login/", {"username": "lead-nlp", "password": "the-right-one"})
    assert locked.status_code == 429 and "Signing in is paused" in locked.content.decode()  # even the right one
    other = Client(REMOTE_ADDR="10.0.0.9").post("/accounts/login/", {"username": "lead-nlp", "password": "x"})
    assert other.status_code == 200  # per username and address: another address is not paused
    event = AuditEvent.objects.get(action="signin_locked_out")
    assert event.after == {"username": "lead-nlp", "ip_address": "127.0.0.1"}
    viewer = APIClient()
    viewer.force_authenticate(User.objects.create_user("someone"))
    refused = viewer.post("/api/v1/lockouts/unlock/", {"username": "lead-nlp", "reason": "me"}, format="json")
    assert refused.status_code == 403 and viewer.get("/api/v1/lockouts/").status_code == 403
    admin = APIClient()
    admin.force_authenticate(org.admin)
    rows = {(row["ip_address"], row["locked"]) for row in admin.get("/api/v1/lockouts/").json()}
    assert rows == {("127.0.0.1", True), ("10.0.0.9", False)}
    lifted = admin.post(
        "/api/v1/lockouts/unlock/", {"username": "lead-nlp", "reason": "she called the help desk"}, format="json"
    )
    assert lifted.status_code == 200 and lifted.json()["removed"] == 2  # every address of that username
    assert AuditEvent.objects.get(action="signin_unlock").reason == "she called the help desk"
    signed = client.post("/accounts/login/", {"username": "lead-nlp", "password": "the-right-one"})
    assert signed.status_code == 302


def test_with_debug_off_the_pages_scripts_and_the_docs_assets_are_served_without_collectstatic(demo):
    """Issue #13.7: with debug off (as every test runs) and an empty STATIC_ROOT, htmx, the quota form's
    script, ReDoc and the admin's styles are served by the app itself (WhiteNoise from the apps' static
    folders), so live validation and the preview do not silently disappear."""
    import re

    from django.conf import settings

    assert not settings.DEBUG
    client = Client()
    client.force_login(User.objects.get(username="lead-nlp"))
    from quotas.models import OrgUnit

    project = OrgUnit.objects.get(path="acme/research/nlp/llm-pretrain")
    page = client.get(f"/units/{project.pk}/quotas/").content.decode()
    docs = Client().get("/api/redoc/").content.decode()
    scripts = re.findall(r'<script[^>]* src="(/static/[^"]+)"', page + docs)
    assert any("htmx" in s for s in scripts) and any("quota-form" in s for s in scripts) and len(scripts) >= 3
    for url in [*scripts, "/static/admin/css/base.css"]:
        served = client.get(url)
        assert served.status_code == 200 and int(served["Content-Length"]) > 100, url
