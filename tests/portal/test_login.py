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
    assert signed_in.status_code == 302 and signed_in["Location"] == "/"
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
