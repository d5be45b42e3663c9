"""Showback on the database: the API's lines add up to the fleet's cost to the cent, its device-hours
agree with the usage API for the same month, rolled-up rows hold their subtree, unknown prices stay
unknown, visibility follows the setting, and one page costs the same queries whatever the units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.services import usage_replay_load, usage_rollup
from quotas import services
from tests.accounting.test_usage import T0, random_rows, replay
from tests.clock import made_on

pytestmark = pytest.mark.django_db


@pytest.fixture
def month(org):
    services.flavor_set(actor=org.admin, reason="t", cluster=org.cluster, name="a100", price_per_device_hour="2.4999")
    usage_replay_load(
        lines=replay(random_rows(minutes=180)),
        cluster=org.cluster,
        units={"nlp": org.nlp, "vision": org.vision, "ops": org.ops},
        name="three hours",
    )
    usage_rollup(start=T0, end=T0 + timedelta(hours=4))
    return org


def test_lines_add_up_to_the_fleet_cost_and_agree_with_the_usage_api(month, admin_client):
    own = admin_client.get("/api/v1/showback/", {"month": "2026-11", "rollup": "false"}).json()
    (flavor,) = own["flavors"]
    assert flavor["flavor_key"] == "west/a100" and flavor["price_per_device_hour"] == "2.4999"
    hours = (T0.replace(day=1) + timedelta(days=32)).replace(day=1) - T0.replace(day=1)
    assert flavor["fleet_h"] == pytest.approx(120 * hours.total_seconds() / 3600)  # the whole month, every device
    costs = sum(Decimal(line["cost"]) for line in own["lines"]) + Decimal(flavor["unshared_cost"])
    assert costs == Decimal(flavor["fleet_cost"])  # to the cent
    assert Decimal(flavor["fleet_cost"]) == (Decimal("2.4999") * Decimal(flavor["fleet_h"])).quantize(Decimal("0.01"))
    parts = sum(line["used_h"] + line["idle_h"] + line["borrowed_h"] for line in own["lines"]) + flavor["shared_h"]
    assert parts == pytest.approx(flavor["fleet_h"], abs=0.01)

    usage = admin_client.get("/api/v1/usage/", {"group_by": "unit", "start": T0.isoformat()}).json()
    by_unit = {row["unit_path"]: row for row in usage}
    for line in own["lines"]:
        assert line["used_h"] == pytest.approx(by_unit[line["unit_path"]]["within_h"], abs=0.001)
        assert line["borrowed_h"] == pytest.approx(by_unit[line["unit_path"]]["borrowed_h"], abs=0.001)
        assert line["lent_h"] == pytest.approx(by_unit[line["unit_path"]]["lent_h"], abs=0.001)

    rolled = admin_client.get("/api/v1/showback/", {"month": "2026-11"}).json()
    lines = {line["unit_path"]: line for line in rolled["lines"]}
    research = lines["acme/research"]
    nlp, vision = lines["acme/research/nlp"], lines["acme/research/vision"]
    assert research["used_h"] == pytest.approx(nlp["used_h"] + vision["used_h"], abs=0.002)  # each rounded to 3 places
    assert Decimal(research["cost"]) == Decimal(nlp["cost"]) + Decimal(vision["cost"])
    total = Decimal(lines["acme"]["cost"]) + Decimal(flavor["unshared_cost"])
    assert total == Decimal(flavor["fleet_cost"])  # the organisation's row plus the shared line is the fleet


def test_shared_cost_by_guarantee_leaves_nothing_unshared(month, admin_client, settings):
    settings.ALLOT_SHOWBACK_SHARED_COST = [("acme", "guarantee"), ("", "not_shared")]
    report = admin_client.get("/api/v1/showback/", {"month": "2026-11", "within": "acme"}).json()
    assert report["rule"] == "guarantee"
    (flavor,) = report["flavors"]
    assert abs(Decimal(flavor["unshared_cost"])) <= Decimal("0.03")
    acme = next(line for line in report["lines"] if line["unit_path"] == "acme")
    assert acme["shared_h"] == pytest.approx(flavor["shared_h"])


def test_a_flavor_without_a_price_shows_no_cost(month, admin_client):
    # unpriced since before November (a closed month reads the prices in force at its end: a price
    # removed in December would leave November's costs as they were — tests/accounting/test_review_records.py)
    with made_on(datetime(2026, 10, 31, tzinfo=UTC)):
        services.flavor_set(
            actor=month.admin, reason="t", cluster=month.cluster, name="a100", price_per_device_hour="0"
        )
    report = admin_client.get("/api/v1/showback/", {"month": "2026-11"}).json()
    assert all(line["cost"] is None for line in report["lines"]) and report["flavors"][0]["fleet_cost"] is None
    page = admin_client.get("/showback/", {"month": "2026-11"}).content.decode()
    assert "no price" in page and "acme/research/nlp" in page


def test_bad_periods_name_the_field_and_the_form(month, admin_client):
    assert admin_client.get("/api/v1/showback/").json() == {"month": ["give month=YYYY-MM or day=YYYY-MM-DD"]}
    bad = admin_client.get("/api/v1/showback/", {"month": "May 2020"})
    assert bad.status_code == 400 and "'May 2020' is not YYYY-MM" in bad.json()["month"][0]
    day = admin_client.get("/api/v1/showback/", {"day": "2026-11-02", "rollup": "false"}).json()
    assert day["period"]["hours"] == 24 and {line["unit_path"] for line in day["lines"]} >= {"acme/research/nlp"}


def test_visibility_leads_restricts_costs_to_their_subtree(month, client, settings):
    from tests.factories import UserFactory

    lead = UserFactory()
    month.vision.leads.add(lead)
    client.force_login(lead)
    assert client.get("/api/v1/showback/", {"month": "2026-11"}).status_code == 200  # everyone reads, by default
    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    assert client.get("/api/v1/showback/", {"month": "2026-11"}).status_code == 403
    assert client.get("/api/v1/showback/", {"month": "2026-11", "within": "acme/research"}).status_code == 403
    mine = client.get("/api/v1/showback/", {"month": "2026-11", "within": "acme/research/vision"})
    assert mine.status_code == 200 and {line["unit_path"] for line in mine.json()["lines"]} == {"acme/research/vision"}
    # issue #27.9: the page opens on the unit the lead leads, with a list of theirs, not on an error
    page = client.get("/showback/", {"month": "2026-11"}).content.decode()
    assert "choose one of the units" not in page and "<option selected>acme/research/vision</option>" in page
    assert "choose one of the units you lead" in client.get("/showback/", {"within": "acme"}).content.decode()


def test_one_page_costs_the_same_queries_for_more_units(org, admin_client):
    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert admin_client.get("/api/v1/showback/", {"month": "2026-11"}).status_code == 200
        return len(seen)

    usage_replay_load(lines=replay([r for r in random_rows(minutes=30) if r[1] == "nlp"]), cluster=org.cluster,
                      units={"nlp": org.nlp}, name="one")  # fmt: skip
    usage_rollup(start=T0, end=T0 + timedelta(hours=1))
    one = queries()
    usage_replay_load(lines=replay(random_rows(minutes=30)), cluster=org.cluster,
                      units={"nlp": org.nlp, "vision": org.vision, "ops": org.ops}, name="three")  # fmt: skip
    usage_rollup(start=T0, end=T0 + timedelta(hours=1))
    assert queries() == one


def test_a_unit_archived_mid_month_keeps_its_history(month, admin_client):
    services.org_unit_archive(actor=month.admin, reason="team disbanded", unit=month.vision)
    report = admin_client.get("/api/v1/showback/", {"month": "2026-11", "rollup": "false"}).json()
    vision = next(line for line in report["lines"] if line["unit_path"] == "acme/research/vision")
    assert vision["archived"] and vision["used_h"] > 0 and vision["cost"] is not None
