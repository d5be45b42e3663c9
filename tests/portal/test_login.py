"""Server-rendered pages: sign-in for everyone (not only admins), the organisation page."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_team_lead_signs_in_and_sees_the_organisation(org):
    User.objects.create_user("lead-nlp", password="pw-for-tests")
    client = Client()
    assert client.get("/")["Location"].startswith("/accounts/login/")
    page = client.get("/accounts/login/")
    assert b'<label for="id_username">Username</label>' in page.content
    signed_in = client.post("/accounts/login/", {"username": "lead-nlp", "password": "pw-for-tests"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/start/"  # leads nothing: the organisation
    assert client.get("/start/")["Location"] == "/"
    home = client.get("/").content.decode()
    assert "Every invariant holds." in home
    assert "west/a100 20/30" in home  # llm: guarantee 20, effective ceiling 30
    capacity = client.get("/capacity/").content.decode()
    assert (
        "<td>west/a100</td><td>A100</td><td>120</td><td>10</td><td>10</td>" in capacity
    )  # physical, reserved, headroom


def test_a_wrong_password_is_refused_with_a_message(org):
    User.objects.create_user("lead-nlp", password="pw-for-tests")
    page = Client().post("/accounts/login/", {"username": "lead-nlp", "password": "wrong"})
    assert page.status_code == 200 and b'role="alert"' in page.content


def test_single_sign_on_is_off_by_default_and_wired_when_configured(tmp_path):
    import os
    import subprocess
    import sys

    probe = (
        "import django; django.setup(); from django.conf import settings; from django.urls import reverse; "
        "print(settings.AUTHENTICATION_BACKENDS[1], reverse('oidc_authentication_init'))"
    )
    base = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "ALLOT_SECRET_KEY": "x"}
    missing = subprocess.run(
        [sys.executable, "-c", probe], env={**base, "ALLOT_OIDC_ENABLED": "true"}, capture_output=True, text=True
    )
    assert missing.returncode != 0 and "ALLOT_OIDC_CLIENT_ID must be set" in missing.stderr
    oidc = {
        f"ALLOT_OIDC_{k}": f"https://sso.example.org/{k.lower()}"
        for k in ("AUTHORIZATION_ENDPOINT", "TOKEN_ENDPOINT", "USER_ENDPOINT", "JWKS_ENDPOINT")
    }
    wired = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={
            **base,
            **oidc,
            "ALLOT_OIDC_ENABLED": "true",
            "ALLOT_OIDC_CLIENT_ID": "allot",
            "ALLOT_OIDC_CLIENT_SECRET": "s",
        },
    )
    assert wired.returncode == 0, wired.stderr
    assert wired.stdout.split() == ["mozilla_django_oidc.auth.OIDCAuthenticationBackend", "/oidc/authenticate/"]
    assert "single sign-on" not in Client().get("/accounts/login/").content.decode()  # off here


def test_forms_need_the_csrf_token(demo):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.get(username="lead-nlp"))
    from quotas.models import OrgUnit

    project = OrgUnit.objects.get(path="acme/research/nlp/llm-pretrain")
    assert client.post(f"/units/{project.pk}/quotas/", {"reason": "x"}).status_code == 403
