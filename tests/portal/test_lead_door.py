"""The lead's everyday task behind the right door (issue #42): the team page lists its projects'
quotas with an edit button each, on top; a change the team's envelope cannot hold is sent from the
same form as one change request that raises the envelope just enough — and where the department has
no room the lead may ask for, the form says whose it is to give, not "make a change request"."""

import pytest
from django.contrib.auth.models import User

from quotas import services
from quotas.models import ChangeRequest, ChangeRequestStatus, Quota
from quotas.policy import Resource
from quotas.policy.violations import PolicyViolationError
from quotas.services.quota import QuotaChange
from tests.portal.test_pages import field, form_for, gpu, signed_in, unit

pytestmark = pytest.mark.django_db


def test_the_team_page_opens_with_its_projects_quotas_and_an_edit_button_each(demo):
    lead = signed_in("lead-nlp")
    nlp, pretrain = unit("acme/research/nlp"), unit("acme/research/nlp/llm-pretrain")
    page = lead.get(f"/units/{nlp.pk}/").content.decode()
    card = page.split('id="inside-quotas"', 1)[1].split("</section>", 1)[0]
    assert page.index('id="inside-quotas"') < page.index("<h2>Quotas</h2>")  # on top, not at the bottom
    q = gpu(pretrain.path)
    assert f"k8s-west/a100-80gb <strong>{q.guarantee}</strong> ({q.guarantee + q.burst})" in card
    assert f'href="/units/{pretrain.pk}/quotas/">Edit llm-pretrain</a>' in card
    # click 2: the project's form; click 3: save — lowered at once
    data = form_for(lead, pretrain)
    data[field(pretrain, "guarantee")] = str(q.guarantee - 2)
    data["reason"] = "fewer runs"
    assert lead.post(f"/units/{pretrain.pk}/quotas/", data).status_code == 302
    assert gpu(pretrain.path).guarantee == q.guarantee - 2
    viewer = signed_in("viewer").get(f"/units/{nlp.pk}/").content.decode()
    assert 'id="inside-quotas"' not in viewer  # nothing to edit: no card


def room(path, flavor="a100-80gb"):
    """What a unit's guarantee leaves after its children's."""
    q = gpu(path, flavor)
    kids = Quota.objects.filter(unit__parent=q.unit, flavor=q.flavor, resource=q.resource, unit__archived_at=None)
    return q.guarantee - sum(k.guarantee for k in kids)


def test_above_the_envelope_the_same_form_sends_one_change_request_that_raises_it(demo):
    lead = signed_in("lead-nlp")
    pretrain, nlp = unit("acme/research/nlp/llm-pretrain"), gpu("acme/research/nlp")
    before = gpu(pretrain.path)
    more = room(nlp.unit.path) + 3  # three past what nlp has left to give
    assert room("acme/research") >= 3  # research can give it
    data = form_for(lead, pretrain)
    data[field(pretrain, "guarantee")] = str(before.guarantee + more)
    data["reason"] = "the December pretraining run"
    failed = lead.post(f"/units/{pretrain.pk}/quotas/", data)
    text = failed.content.decode()
    assert failed.status_code == 400 and 'id="as-request"' in text
    assert f"acme/research/nlp&#x27;s k8s-west/a100-80gb guarantee {nlp.guarantee} → {nlp.guarantee + 3}" in text
    live = lead.post(f"/units/{pretrain.pk}/quotas/check/", data).content.decode()  # while typing, too
    assert "Send as a change request" in live

    sent = lead.post(f"/units/{pretrain.pk}/quotas/", {**data, "as_request": "1"})
    request = ChangeRequest.objects.get()
    assert sent.status_code == 302 and sent["Location"] == f"/requests/{request.pk}/"
    assert request.unit.path == "acme/research/nlp" and len(request.changes) == 2
    assert gpu(pretrain.path).guarantee == before.guarantee  # nothing applied yet
    services.change_request_approve(actor=User.objects.get(username="head-research"), request=request)
    request.refresh_from_db()
    assert request.status == ChangeRequestStatus.APPLIED
    after = gpu("acme/research/nlp")
    assert gpu(pretrain.path).guarantee == before.guarantee + more and after.guarantee == nlp.guarantee + 3
    assert after.guarantee + after.burst == nlp.guarantee + nlp.burst or after.burst == 0  # the same ceiling


def test_where_the_department_has_no_room_the_form_says_whose_it_is_to_give(demo):
    lead = signed_in("lead-nlp")
    pretrain, nlp = unit("acme/research/nlp/llm-pretrain"), gpu("acme/research/nlp")
    before = gpu(pretrain.path)
    more = room(nlp.unit.path) + room("acme/research") + 1  # one more than nlp and research have left
    data = form_for(lead, pretrain)
    data[field(pretrain, "guarantee")] = str(before.guarantee + more)
    data["reason"] = "too much"
    text = lead.post(f"/units/{pretrain.pk}/quotas/", data).content.decode()
    offer = text.split('id="as-request"', 1)[1].split("</div>", 1)[0]
    assert "it would still break the quota policy" in offer and "Send as a change request" not in offer
    assert "its leads decide how it is shared" in offer and "ask them to free 1 inside acme/research" in offer
    assert "(a change request if" not in offer  # never "make a change request" to someone making one
    lead.post(f"/units/{pretrain.pk}/quotas/", {**data, "as_request": "1"})  # a forged button
    assert ChangeRequest.objects.count() == 0 and gpu(pretrain.path).guarantee == before.guarantee


def test_a_request_for_more_than_the_department_has_left_names_whose_it_is_to_give(demo):

    nlp = gpu("acme/research/nlp")
    asked = nlp.guarantee + room("acme/research") + 2
    change = QuotaChange(nlp.unit_id, nlp.flavor_id, Resource.GPU, asked)
    with pytest.raises(PolicyViolationError) as refused:
        services.change_request_submit(actor=User.objects.get(username="lead-nlp"), reason="more", changes=[change])
    [short] = [v for v in refused.value.violations if v.unit == "acme/research"]
    assert "ask them to free 2 inside acme/research" in short.hint and "change request" not in short.hint
