"""Delegation: leads set inside their envelope; above it they ask, and a head decides."""

import pytest
from django.contrib.auth.models import User
from django.core import mail

from quotas import services
from quotas.access import NotAllowedError, may_set_directly
from quotas.errors import InputError
from quotas.models import AuditEvent, ChangeRequestStatus, OrgUnit, Quota
from quotas.policy import Resource
from quotas.policy.violations import PolicyViolationError

pytestmark = pytest.mark.django_db(transaction=True)  # mail goes out on commit
GPU = Resource.GPU


@pytest.fixture
def people(demo):
    return {name: User.objects.get(username=name) for name in ("lead-nlp", "head-research", "lead-vision", "admin")}


def gpu(path, flavor="a100-80gb"):
    return Quota.objects.get(unit__path=path, flavor__name=flavor, resource=GPU.value)


def change(path, guarantee, flavor="a100-80gb", **values):
    q = gpu(path, flavor)
    return services.QuotaChange(q.unit_id, q.flavor_id, GPU, guarantee, values.get("burst"), values.get("lendable"))


def test_who_may_set_what_directly(people):
    nlp, pretrain = (
        OrgUnit.objects.get(path="acme/research/nlp"),
        OrgUnit.objects.get(path="acme/research/nlp/llm-pretrain"),
    )
    assert may_set_directly(people["lead-nlp"], pretrain) and not may_set_directly(people["lead-nlp"], nlp)
    assert may_set_directly(people["head-research"], nlp) and not may_set_directly(people["lead-vision"], pretrain)
    assert may_set_directly(people["admin"], OrgUnit.objects.get(path="acme"))


def test_a_lead_asks_the_head_approves_and_both_hear_of_it(people):
    before = gpu("acme/research/nlp").guarantee
    request = services.change_request_submit(
        actor=people["lead-nlp"],
        reason="pretraining run in December",
        changes=[change("acme/research/nlp", before + 4)],
    )
    assert request.unit.path == "acme/research/nlp" and request.status == ChangeRequestStatus.PENDING
    assert [m.to for m in mail.outbox] == [["head-research@example.org"]]
    assert "pretraining run in December" in mail.outbox[0].body
    with pytest.raises(NotAllowedError):
        services.change_request_approve(actor=people["lead-nlp"], request=request)  # not your own
    with pytest.raises(NotAllowedError):
        services.change_request_approve(actor=people["lead-vision"], request=request)
    services.change_request_approve(actor=people["head-research"], request=request, comment="ok for December")
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.APPLIED and gpu("acme/research/nlp").guarantee == before + 4
    assert sorted(mail.outbox[-1].to) == ["head-research@example.org", "lead-nlp@example.org"]
    event = AuditEvent.objects.filter(action="quota_set").latest("id")
    assert event.actor == people["head-research"] and f"change request #{request.pk}" in event.reason
    with pytest.raises(InputError):  # approving twice applies once
        services.change_request_approve(actor=people["head-research"], request=request)


def test_who_asked_never_approves_their_own_request_but_may_withdraw_it(people, settings):
    """Issue #42: four eyes — the head who asks for a change under their own unit (a plan accepted, a
    budget) could approve it themselves; now another lead above, or a platform admin, does."""
    from django.test import Client

    before = gpu("acme/research/nlp").guarantee
    ask = lambda reason: services.change_request_submit(
        actor=people["head-research"], reason=reason, changes=[change("acme/research/nlp", before + 2)]
    )
    request = ask("december run")
    with pytest.raises(NotAllowedError, match=r"you asked for request #\d+: another lead above acme/research/nlp"):
        services.change_request_approve(actor=people["head-research"], request=request, comment="mine")
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.PENDING and gpu("acme/research/nlp").guarantee == before
    client = Client()
    client.force_login(people["head-research"])
    page = client.get(f"/requests/{request.pk}/").content.decode()
    assert 'id="four-eyes"' in page and "Approve and apply" not in page and ">Withdraw</button>" in page
    client.post(f"/requests/{request.pk}/", {"decision": "approve", "comment": "by hand"})  # a forged form
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.PENDING and gpu("acme/research/nlp").guarantee == before
    api = client.post(f"/api/v1/change-requests/{request.pk}/approve/", {}, content_type="application/json")
    assert api.status_code == 403 and "four eyes" in str(api.json())
    client.post(f"/requests/{request.pk}/", {"decision": "reject", "comment": "not needed after all"})
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.REJECTED and request.decided_by == people["head-research"]

    again = ask("december run, again")  # another decides it: a platform admin
    services.change_request_approve(actor=people["admin"], request=again, comment="ok")
    assert gpu("acme/research/nlp").guarantee == before + 2
    assert not AuditEvent.objects.filter(
        action="quota_set", actor=people["head-research"], reason__contains=f"#{request.pk}"
    ).exists()

    settings.ALLOT_REQUESTS_SECOND_PERSON = False  # one person runs the platform alone: a documented choice
    alone = services.change_request_submit(
        actor=people["head-research"], reason="alone", changes=[change("acme/research/nlp", before)]
    )
    assert "Approve and apply" in client.get(f"/requests/{alone.pk}/").content.decode()
    services.change_request_approve(actor=people["head-research"], request=alone)
    assert gpu("acme/research/nlp").guarantee == before


def test_a_request_made_stale_is_refused_and_nothing_is_applied(people):
    nlp = gpu("acme/research/nlp").guarantee
    request = services.change_request_submit(
        actor=people["lead-nlp"],
        reason="more",
        changes=[change("acme/research/nlp", nlp + 4), change("acme/research/nlp", 95, flavor="a100-40gb")],
    )
    services.quota_set_bulk(
        actor=people["head-research"], reason="meanwhile", changes=[change("acme/research/nlp", nlp + 1)]
    )
    from django.test import Client

    client = Client()
    client.force_login(people["head-research"])
    answer = client.post(f"/requests/{request.pk}/", {"decision": "approve", "comment": ""}, follow=True)
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.STALE and "changed since version" in request.outcome["detail"]
    assert gpu("acme/research/nlp").guarantee == nlp + 1 and gpu("acme/research/nlp", "a100-40gb").guarantee == 90
    [said] = [(m.level_tag, m.message) for m in answer.context["messages"]]  # refused: never a green banner
    assert said[0] == "error" and "refused as stale, nothing applied" in said[1] and "changed since" in said[1]


def test_a_request_that_no_longer_fits_is_refused(people):
    vision = gpu("acme/research/vision").guarantee
    request = services.change_request_submit(
        actor=people["lead-vision"], reason="more", changes=[change("acme/research/vision", vision + 9)]
    )
    services.quota_set_bulk(
        actor=people["head-research"],
        reason="nlp first",
        changes=[change("acme/research/nlp", gpu("acme/research/nlp").guarantee + 9)],
    )
    services.change_request_approve(actor=people["head-research"], request=request)
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.STALE
    assert request.outcome["violations"][0]["code"] == "children_exceed_guarantee"
    assert gpu("acme/research/vision").guarantee == vision


def test_requests_that_could_never_be_approved_or_are_not_yours(people):
    with pytest.raises(PolicyViolationError):
        services.change_request_submit(actor=people["lead-nlp"], reason="x", changes=[change("acme/research/nlp", 999)])
    with pytest.raises(NotAllowedError):
        services.change_request_submit(
            actor=people["lead-nlp"], reason="x", changes=[change("acme/research/vision", 1)]
        )


def test_rejection_needs_a_comment(people):
    request = services.change_request_submit(
        actor=people["lead-nlp"],
        reason="x",
        changes=[change("acme/research/nlp", gpu("acme/research/nlp").guarantee + 1)],
    )
    with pytest.raises(InputError):
        services.change_request_reject(actor=people["head-research"], request=request, comment=" ")
    services.change_request_reject(actor=people["head-research"], request=request, comment="not this quarter")
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.REJECTED and "not this quarter" in mail.outbox[-1].body


def test_the_same_request_sent_twice_is_recorded_once(people):
    """A double click, or a browser retrying the POST: one request, one mail, one audit row."""
    before = gpu("acme/research/nlp").guarantee
    send = [change("acme/research/nlp", before + 3)]
    first = services.change_request_submit(actor=people["lead-nlp"], reason="burst of evals", changes=send)
    again = services.change_request_submit(actor=people["lead-nlp"], reason="burst of evals", changes=send)
    other = services.change_request_submit(actor=people["lead-nlp"], reason="a different reason", changes=send)
    assert again.pk == first.pk and other.pk != first.pk
    assert len(mail.outbox) == 2
    assert AuditEvent.objects.filter(action="change_request_submit").count() == 2


def test_a_request_across_two_departments_is_decided_only_above_both(people):
    """Issue #13.1: a lead of teams in two departments asks for research/nlp and production/ranking;
    the head of production approved it and research/nlp's guarantee changed. Only someone above every
    unit a request changes may decide it: the head of one department may not, acme's admin may."""
    lead = people["lead-nlp"]
    OrgUnit.objects.get(path="acme/production/ranking").leads.add(lead)
    head_production = User.objects.get(username="head-production")
    nlp_before, ranking_before = gpu("acme/research/nlp").guarantee, gpu("acme/production/ranking").guarantee
    request = services.change_request_submit(
        actor=lead,
        reason="one project across both teams",
        changes=[change("acme/research/nlp", nlp_before + 1), change("acme/production/ranking", ranking_before + 1)],
    )
    assert request.unit.path == "acme"  # listed where both meet
    assert sorted(u.path for u in request.units.all()) == ["acme/production/ranking", "acme/research/nlp"]
    # nobody leads acme in the demo: the platform admins hear of it, not one department's head
    assert [m.to for m in mail.outbox] == [["admin@example.org"]]
    for head in (head_production, people["head-research"]):
        with pytest.raises(NotAllowedError, match="above every unit this request changes"):
            services.change_request_approve(actor=head, request=request)
        with pytest.raises(NotAllowedError):
            services.change_request_reject(actor=head, request=request, comment="no")
    assert gpu("acme/research/nlp").guarantee == nlp_before  # nothing applied
    services.change_request_approve(actor=people["admin"], request=request)
    assert gpu("acme/research/nlp").guarantee == nlp_before + 1
    assert gpu("acme/production/ranking").guarantee == ranking_before + 1


def test_who_reads_a_change_request_is_one_rule_for_the_portal_and_the_api(people):
    """Issue #13.8: the API let any signed-in user read every request and its reason while the portal
    refused a viewer. Now both ask quotas.access.may_read_request: whoever asked, the leads of a unit
    it changes or above, platform admins."""
    from django.test import Client

    request = services.change_request_submit(
        actor=people["lead-nlp"],
        reason="secret project codename",
        changes=[change("acme/research/nlp", gpu("acme/research/nlp").guarantee + 1)],
    )
    readers = {"lead-nlp": True, "head-research": True, "admin": True, "viewer": False, "lead-vision": False}
    for name, may in readers.items():
        client = Client()
        client.force_login(User.objects.get(username=name))
        page = client.get(f"/requests/{request.pk}/")
        one = client.get(f"/api/v1/change-requests/{request.pk}/")
        listed = client.get("/api/v1/change-requests/").json()
        ids = [r["id"] for r in listed.get("results", listed)]
        assert (page.status_code, one.status_code, request.pk in ids) == (
            (200, 200, True) if may else (403, 404, False)
        ), name
        if may:
            assert one.json()["unit_paths"] == ["acme/research/nlp"]


def test_the_request_page_and_mails_say_now_to_asked_what_it_would_break_and_link(people):
    """Issue #13.12: the page and the mail showed dicts of ids; now every item reads current → proposed in
    the units people write, with the violations it would cause now, and the mail links the page."""
    from django.test import Client

    before = gpu("acme/research/nlp").guarantee
    request = services.change_request_submit(
        actor=people["lead-nlp"], reason="december run", changes=[change("acme/research/nlp", before + 3)]
    )
    [asked] = mail.outbox
    assert "lead-nlp asks for a quota change on acme/research/nlp" in asked.body
    assert (
        f"acme/research/nlp, k8s-west/a100-80gb (NVIDIA A100-SXM4-80GB) GPUs: guarantee {before} → {before + 3}"
        in asked.body
    )
    assert "It fits the quota policy as it stands now." in asked.body
    assert f"http://127.0.0.1:8000/requests/{request.pk}/" in asked.body
    assert "{'unit'" not in asked.body and "'flavor'" not in asked.body
    client = Client()
    client.force_login(people["head-research"])
    page = client.get(f"/requests/{request.pk}/").content.decode()
    assert f"guarantee <strong>{before} → {before + 3}</strong>" in page
    assert "Not applied yet: if approved now, it would fit the quota policy." in page
    # meanwhile vision takes the rest of research's room: the page says what approving would now break
    research = gpu("acme/research")
    siblings = Quota.objects.filter(
        unit__parent=research.unit, flavor=research.flavor, resource=GPU.value, unit__archived_at=None
    )
    room = research.guarantee - sum(q.guarantee for q in siblings)
    vision = gpu("acme/research/vision")
    services.quota_set(
        actor=people["head-research"],
        reason="vision grows",
        unit_id=vision.unit_id,
        flavor_id=vision.flavor_id,
        resource=GPU,
        guarantee=vision.guarantee + room - 1,
    )
    page = client.get(f"/requests/{request.pk}/").content.decode()
    assert "If it were approved now, it would break the quota policy" in page and "acme/research" in page
    client.post(f"/requests/{request.pk}/", {"decision": "reject", "comment": "not this month"})
    decided = mail.outbox[-1].body
    assert "head-research rejected change request" in decided and '"not this month"' in decided
