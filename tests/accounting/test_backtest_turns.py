"""Backtests take turns (issue #42): eight parallel backtests from one token took 34–40 s each and a
viewer's page 35.8 s. Now each person runs one at a time and the instance at most
ALLOT_BACKTESTS_AT_ONCE; the API answers the rest 429 with Retry-After, the what-if panel says it is
still working and tries again by itself."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from accounting.services.backtest_slots import BacktestBusy, backtest_turn
from quotas.models import Quota
from quotas.policy import Resource
from tests.accounting.test_review import month  # noqa: F401  (the fixture: November 2026, every hour)

pytestmark = pytest.mark.django_db


def ask(month):  # noqa: F811
    return {"unit": "acme", "month": month, "changes": [{"unit": "acme/ops", "flavor": "west/a100", "guarantee": 40}]}


def test_one_backtest_per_person_and_a_few_per_instance(org, month, admin_client, admin_user, settings):  # noqa: F811
    settings.ALLOT_BACKTESTS_AT_ONCE = 2
    post = lambda client: client.post("/api/v1/backtest/", ask(month), content_type="application/json")
    with backtest_turn(admin_user.pk):  # the admin's first backtest is still running
        second = post(admin_client)
        assert second.status_code == 429 and second["Retry-After"] == "5"
        assert "a backtest of yours is still running" in second.json()["detail"]
        third, other = (User.objects.create_superuser(name) for name in ("third", "other"))
        with backtest_turn(third.pk):  # and someone else's: both slots taken
            admin_client.force_login(other)
            full = post(admin_client)
            assert full.status_code == 429 and "ALLOT_BACKTESTS_AT_ONCE" in full.json()["detail"]
        assert post(admin_client).status_code == 200  # a slot came free
        admin_client.force_login(admin_user)
        assert post(admin_client).status_code == 429  # the admin's own turn is still held
    assert post(admin_client).status_code == 200  # every turn given back, even after a refusal


def test_a_turn_is_given_back_when_the_backtest_fails(admin_user, settings):
    settings.ALLOT_BACKTESTS_AT_ONCE = 1
    with pytest.raises(ZeroDivisionError), backtest_turn(admin_user.pk):
        _ = 1 / 0
    with backtest_turn(admin_user.pk):  # the failure gave its turn back: this one gets it
        held = backtest_turn(admin_user.pk)
        with pytest.raises(BacktestBusy):
            held.__enter__()


def test_the_what_if_panel_says_it_is_still_working_and_tries_again(org, month, admin_client, admin_user):  # noqa: F811
    row = Quota.objects.get(unit=org.ops, flavor=org.flavor, resource=Resource.GPU)
    prefix = f"{org.flavor.pk}-gpu"
    form = {
        f"guarantee-{prefix}": "40",
        f"burst-{prefix}": "0",
        f"lendable-{prefix}": "0",
        f"version-{prefix}": row.version,
    }
    with backtest_turn(admin_user.pk):
        page = admin_client.post(f"/units/{org.ops.pk}/what-if/", form)
        text = page.content.decode()
        assert page.status_code == 200 and 'id="whatif-busy"' in text and "Queued" not in text
        assert 'hx-trigger="load delay:3s"' in text and f"/units/{org.ops.pk}/what-if/" in text
    again = admin_client.post(f"/units/{org.ops.pk}/what-if/", form).content.decode()
    assert "Queued 7,200 → 0 device-hours" in again
