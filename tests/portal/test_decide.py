"""An approver decides with the facts in view (issue #42): on a pending request's page, what each unit
holds now, the guarantee the level above has left before and after, how the units used those GPUs over
the last 30 days (under the usage read rule), and the exact objects approval changes on each cluster."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from accounting.models import UsageHour
from quotas import services
from quotas.models import QueueUsage, Quota
from quotas.policy import Resource
from tests.portal.test_approvers import signed_in
from tests.portal.test_browser import gpu

pytestmark = pytest.mark.django_db


def change(q, more):
    return services.QuotaChange(q.unit_id, q.flavor_id, Resource.GPU, q.guarantee + more, None, None)


def section(html, start, end):
    return html.split(start, 1)[1].split(end, 1)[0]


def used(q, held_by_hour, queued=0.0):
    """Hourly rollups for ``q``'s unit and flavor: one hour per value, ending two days ago."""
    UsageHour.objects.filter(unit_id=q.unit_id, flavor_id=q.flavor_id).delete()
    last = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    UsageHour.objects.bulk_create(
        UsageHour(unit_id=q.unit_id, flavor_id=q.flavor_id, hour=last - timedelta(hours=i), minutes=60,
                  guarantee=q.guarantee, allocated=held, within=min(held, q.guarantee), pending=queued)
        for i, held in enumerate(held_by_hour)
    )  # fmt: skip


def test_the_approver_sees_holdings_room_usage_and_the_cluster_diff(demo):
    nlp, research = gpu("acme/research/nlp"), gpu("acme/research")
    siblings = Quota.objects.filter(
        unit__parent_id=research.unit_id, flavor_id=research.flavor_id, resource="nvidia.com/gpu"
    )
    room = research.guarantee - sum(q.guarantee for q in siblings)
    QueueUsage.objects.update_or_create(
        unit_id=nlp.unit_id,
        cluster=nlp.flavor.cluster,
        flavor=nlp.flavor.name,
        resource="nvidia.com/gpu",
        defaults={"total": nlp.guarantee - 3, "observed_at": timezone.now()},
    )
    below = nlp.unit.children.filter(quotas__flavor_id=nlp.flavor_id).values_list(
        "pk", flat=True
    )  # the subtree adds up: the test's hours are the only ones of nlp and below on this flavor
    UsageHour.objects.filter(unit_id__in=list(below), flavor_id=nlp.flavor_id).delete()
    used(nlp, [nlp.guarantee, nlp.guarantee, 4.0, 2.0], queued=5.0)
    asked = services.change_request_submit(
        actor=User.objects.get(username="lead-nlp"), reason="december run", changes=[change(nlp, 2)]
    )

    html = signed_in("head-research").get(f"/requests/{asked.pk}/").content.decode()
    standing = section(html, 'id="standing"', "</table>")
    assert "acme/research/nlp" in standing and f"{nlp.guarantee} → <strong>{nlp.guarantee + 2}</strong>" in standing
    assert f"<td>{nlp.guarantee - 3}</td>" in standing  # held now, as the cluster last reported it
    assert (
        f"{room} → <strong>{room - 2}</strong>" in standing and f"of acme/research's {research.guarantee}" in standing
    )

    usage = section(html, 'id="request-usage"', "</table>")
    assert "(4 h with telemetry)" in usage
    g = f"{float(nlp.guarantee):.1f}"
    assert f"<td>{g}</td><td>4.0</td><td>{g}</td>" in usage  # most held, median and 95th percentile (nearest rank)
    assert "50 % <span" in usage and "<td>20</td>" in usage  # 2 of 4 hours at the whole guarantee; 4 × 5 queued

    diff = section(html, 'id="cluster-diff"', "</div>")
    own = nlp.guarantee - sum(gpu(p.path).guarantee for p in nlp.unit.children.all())
    # on Kueue a unit's own guarantee (beyond its children's) is its own queue's nominalQuota: nlp's grows by 2,
    # research's own share (the room left above) shrinks by 2; nlp's ceiling grows with it, so its borrowing
    # limit (ceiling − its own) stays as it was
    assert "On <strong>k8s-west</strong>: 2 objects" in diff and "On <strong>slurm-lab</strong>: nothing" in diff
    quota = "spec.resourceGroups[0].flavors[2].resources[2].nominalQuota"
    assert f'update ClusterQueue acme.research.nlp<br><span class="muted">{quota}: {own} → {own + 2}' in diff
    assert f'update Cohort acme.research<br><span class="muted">{quota}: {room} → {room - 2}' in diff


def test_a_lead_of_one_unit_reads_only_their_units_usage_under_the_leads_rule(demo, settings):
    nlp, vision = gpu("acme/research/nlp"), gpu("acme/research/vision")
    used(nlp, [7.0])
    used(vision, [3.0])
    both = services.change_request_submit(
        actor=User.objects.get(username="head-research"), reason="a shift between teams",
        changes=[change(nlp, -1), change(vision, 1)],
    )  # fmt: skip
    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    html = signed_in("lead-vision").get(f"/requests/{both.pk}/").content.decode()
    usage = section(html, 'id="request-usage"', "</table>")
    assert "acme/research/vision" in usage and "acme/research/nlp" not in usage
    assert "The usage of acme/research/nlp is for its leads and above" in html
    settings.ALLOT_SHOWBACK_VISIBILITY = "everyone"
    usage = section(
        signed_in("lead-vision").get(f"/requests/{both.pk}/").content.decode(), 'id="request-usage"', "</table>"
    )
    assert "acme/research/nlp" in usage and "acme/research/vision" in usage


def test_a_request_the_level_above_no_longer_has_room_for_shows_the_room_short(demo):
    nlp, vision, research = gpu("acme/research/nlp"), gpu("acme/research/vision"), gpu("acme/research")
    asked = services.change_request_submit(
        actor=User.objects.get(username="lead-nlp"), reason="december run", changes=[change(nlp, 2)]
    )
    siblings = Quota.objects.filter(
        unit__parent_id=research.unit_id, flavor_id=research.flavor_id, resource="nvidia.com/gpu"
    )
    room = research.guarantee - sum(q.guarantee for q in siblings)
    services.quota_set_bulk(
        actor=User.objects.get(username="head-research"),
        reason="vision takes what was left",
        changes=[change(vision, room)],
    )  # meanwhile
    html = signed_in("head-research").get(f"/requests/{asked.pk}/").content.decode()
    standing = section(html, 'id="standing"', "</table>")
    assert '0 → <strong class="bad">-2</strong>' in standing and "short: the level above must grow first" in standing
    assert "would break the quota policy" in html  # and approval would be refused, as the page says


def test_a_decided_request_and_a_budget_request_show_no_decision_panel(demo):
    from quotas.models import Budget
    from quotas.services.budgets import BudgetChange

    nlp = gpu("acme/research/nlp")
    asked = services.change_request_submit(
        actor=User.objects.get(username="lead-nlp"), reason="december run", changes=[change(nlp, 1)]
    )
    services.change_request_approve(actor=User.objects.get(username="head-research"), request=asked)
    html = signed_in("head-research").get(f"/requests/{asked.pk}/").content.decode()
    assert "Before you decide" not in html and "(when decided → asked)" in html
    budget = BudgetChange(nlp.unit_id, nlp.flavor_id, device_hours=5000)
    assert not Budget.objects.filter(unit_id=nlp.unit_id, flavor_id=nlp.flavor_id).exists()
    only_budget = services.change_request_submit(
        actor=User.objects.get(username="lead-nlp"), reason="a budget", changes=[budget]
    )
    page = signed_in("head-research").get(f"/requests/{only_budget.pk}/")
    assert page.status_code == 200 and "Before you decide" not in page.content.decode()


def test_a_request_of_many_items_reads_their_usage_in_two_queries_with_each_items_own_figures(
    demo, django_assert_max_num_queries
):
    """A whole-plan request changes many units: their usage is read in two queries, not two per item, and
    each item keeps the figures of its own subtree, flavor and 30 days."""
    from accounting.portal.panels import request_usage
    from accounting.selectors.usage import held_by_hour_many

    vision, speech = gpu("acme/research/vision"), gpu("acme/research/speech")
    for q in (vision, speech):
        below = list(q.unit.children.values_list("pk", flat=True))
        UsageHour.objects.filter(unit_id__in=below, flavor_id=q.flavor_id).delete()
    used(vision, [6.0, 4.0, 2.0], queued=1.0)
    used(speech, [1.0, 1.0])
    keys = [("acme/research/vision", vision.flavor_id), ("acme/research/speech", speech.flavor_id), ("acme/x", 0)]
    with django_assert_max_num_queries(2):
        found = held_by_hour_many(keys)
    assert sorted(found[keys[0]][2]) == [(2.0, 1.0), (4.0, 1.0), (6.0, 1.0)]
    assert found[keys[1]][2] == [(1.0, 0.0), (1.0, 0.0)]
    assert found[keys[2]][2] == []  # no usage: an empty window, as for one item
    start, end, _ = found[keys[0]]
    assert end - start == timedelta(days=30)

    class Reader:
        user = User.objects.get(username="head-research")

    asked = services.change_request_submit(
        actor=User.objects.get(username="lead-vision"), reason="t", changes=[change(vision, 1)]
    )
    items = [(vision.unit_id, vision.flavor_id), (speech.unit_id, speech.flavor_id)] * 3
    with django_assert_max_num_queries(8):  # units, flavors, quotas, the reader's units, then the two above
        panel = request_usage(Reader(), asked, items)  # type: ignore[arg-type]
    rows = {r["unit"]: r for r in panel["request_usage"]}
    assert (rows["acme/research/vision"]["peak"], rows["acme/research/vision"]["queued_h"]) == (6.0, 3.0)
    assert (rows["acme/research/speech"]["hours"], rows["acme/research/speech"]["median"]) == (2, 1.0)
