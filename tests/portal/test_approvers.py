"""What an approver is told (issue #42): a badge on every page counting the requests waiting for *their*
decision — never their own where a second person approves — and the list behind it."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from quotas import services
from quotas.models import Quota
from quotas.policy import Resource

pytestmark = pytest.mark.django_db
PAGES = ("/", "/start/", "/capacity/", "/clusters/", "/findings/", "/reviews/")


def signed_in(username):
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def ask(username, path, more, reason):
    q = Quota.objects.get(unit__path=path, flavor__name="a100-80gb", resource="nvidia.com/gpu")
    change = services.QuotaChange(q.unit_id, q.flavor_id, Resource.GPU, q.guarantee + more, None, None)
    return services.change_request_submit(actor=User.objects.get(username=username), reason=reason, changes=[change])


def badge(client, url="/"):
    page = client.get(url, follow=True)
    assert page.status_code == 200, url
    html = page.content.decode()
    if 'id="waiting-badge"' not in html:
        return None
    return int(html.split('id="waiting-badge"', 1)[1].split(">", 1)[1].split("<", 1)[0])


def test_the_approver_sees_what_waits_for_them_on_every_page_and_the_asker_does_not(demo):
    head, lead, viewer, admin = (signed_in(n) for n in ("head-research", "lead-nlp", "viewer", "admin"))
    assert badge(head) is None  # nothing waits: no badge at all
    first = ask("lead-nlp", "acme/research/nlp", 2, "december run")
    ask("lead-vision", "acme/research/vision", 1, "a new detector")
    own = ask("head-research", "acme/research/nlp", 1, "the head's own")  # decided by someone above
    for url in PAGES:
        assert badge(head, url) == 2, url  # nlp's and vision's, not the head's own
    assert badge(lead) is None and badge(viewer) is None  # they decide none
    assert badge(admin) == 3  # a platform admin decides all three, the head's included
    listed = head.get("/requests/").content.decode()
    waiting = listed.split("Waiting for your decision", 1)[1].split("<h2>Yours</h2>", 1)[0]
    assert f"/requests/{first.pk}/" in waiting and f"/requests/{own.pk}/" not in waiting

    services.change_request_approve(actor=User.objects.get(username="head-research"), request=first)
    assert badge(head) == 1  # decided: it waits no more


def test_without_four_eyes_a_head_counts_their_own_request(demo, settings):
    settings.ALLOT_REQUESTS_SECOND_PERSON = False
    head = signed_in("admin")
    ask("admin", "acme/research", 1, "the admin's own")
    assert badge(head) == 1
