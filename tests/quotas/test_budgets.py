"""GPU-hour budgets through the services: edits validated and audited, spend measured from the rollups,
running out audited and compiled (Kueue: LocalQueue stopPolicy Hold, borrowingLimit 0)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from accounting.models import UsageHour
from accounting.services.budgets import budget_views, budgets_evaluate
from quotas import services
from quotas.errors import InputError
from quotas.models import AuditEvent, BudgetSpend
from quotas.policy.kueue import compile_kueue
from quotas.policy.kueue.validate import validate_objects
from quotas.policy.violations import PolicyViolationError, ViolationCode
from quotas.selectors import kueue_target, org_snapshot
from quotas.services import BudgetChange

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 5, 10, 12, tzinfo=UTC)


@pytest.fixture
def tiers(org):
    for name, priority in (("P0", 100000), ("P1", 1000), ("P2", 100)):
        services.tier_set(actor=org.admin, reason="t", name=name, display_name=name, priority=priority)
    return org


def change(org, unit, hours, **kw):
    return BudgetChange(unit.pk, org.flavor.pk, device_hours=hours, **kw)


def test_a_new_budget_gets_the_non_serving_tiers_and_an_audit_row(tiers):
    budget = services.budget_set(actor=tiers.admin, reason="q2 plan", change=change(tiers, tiers.nlp, 5000))
    assert budget.tiers == ["P1", "P2"] and budget.period == "month" and budget.action == "report"
    event = AuditEvent.objects.get(action="budget_set")
    assert event.after is not None
    assert event.unit_path == "acme/research/nlp" and event.after["device_hours"] == 5000 and event.reason == "q2 plan"


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"device_hours": -5}, "device_hours", "outside 0"),
        ({"device_hours": "lots"}, "device_hours", "not a whole number"),
        ({"period": "week"}, "period", "month' or 'quarter"),
        ({"action": "kill"}, "action", "report, no-borrowing, hold or deny"),
        ({"starts_on": "yesterday"}, "starts_on", "YYYY-MM-DD"),
        ({"warn_percent": 0}, "warn_percent", "1 to 100"),
    ],
)
def test_bad_input_names_the_field(tiers, fields, field, said):
    with pytest.raises(InputError) as caught:
        services.budget_set(
            actor=tiers.admin,
            reason="t",
            change=BudgetChange(tiers.nlp.pk, tiers.flavor.pk, **{"device_hours": 10, **fields}),
        )
    assert list(caught.value.errors) == [field] and said in caught.value.errors[field][0]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"carry_over_cap": 200}, "carry_over_cap"),
        ({"tiers": []}, "tiers"),
        ({"tiers": ["P7"]}, "tiers"),
        ({"starts_on": "2020-01-01"}, "starts"),
    ],
)
def test_invariants_refuse_with_the_field(tiers, fields, field):
    with pytest.raises(PolicyViolationError) as caught:
        services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.nlp, 100, **fields))
    assert [v.field for v in caught.value.violations] == [field]
    assert not AuditEvent.objects.filter(action="budget_set").exists()


def test_children_add_up_within_the_parent(tiers):
    services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.research, 1000))
    services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.nlp, 700))
    with pytest.raises(PolicyViolationError) as caught:
        services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.vision, 400))
    (v,) = caught.value.violations
    assert v.code is ViolationCode.BUDGETS_EXCEED_PARENT and (v.limit, v.actual) == (1000, 1100)
    services.budget_set(
        actor=tiers.admin, reason="oversubscribe", change=change(tiers, tiers.research, 1000, oversubscription="1.2")
    )
    services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.vision, 400))


def _hours(unit, flavor, start, hours, within, borrowed=0.0):
    UsageHour.objects.bulk_create(
        UsageHour(
            unit=unit,
            flavor=flavor,
            hour=start + timedelta(hours=h),
            minutes=60,
            allocated=within + borrowed,
            within=within,
            borrowed=borrowed,
        )
        for h in range(hours)
    )


def test_spend_is_the_subtrees_hours_with_borrowed_at_half_and_running_out_is_audited(tiers, monkeypatch):
    services.budget_set(
        actor=tiers.admin, reason="t", change=change(tiers, tiers.nlp, 200, action="hold", tiers=["P0", "P1", "P2"])
    )
    start = datetime(2026, 5, 1, tzinfo=UTC)
    _hours(tiers.nlp, tiers.flavor, start, 10, within=4, borrowed=2)  # 10 h × (4 + 1) = 50
    _hours(tiers.llm, tiers.flavor, start + timedelta(days=5), 20, within=5)  # 100, under nlp
    _hours(tiers.vision, tiers.flavor, start, 50, within=8)  # not nlp's
    _hours(tiers.nlp, tiers.flavor, start - timedelta(days=2), 10, within=8)  # April: not this period
    result = budgets_evaluate(now=NOW)
    assert result["budgets"] == 1 and result["exhausted"] == 0
    (view,) = budget_views(now=NOW)
    assert view.status.spent == pytest.approx(150) and view.status.remaining == pytest.approx(50)
    assert view.status.level.value == "ok" and view.as_dict()["percent"] == 75.0
    # the trailing 72 h hold none of it: no burn rate, no forecast
    assert view.status.rate_per_day == 0 and view.status.exhausts_at is None
    _hours(tiers.llm, tiers.flavor, NOW - timedelta(hours=24), 24, within=3)  # +72 in the last day
    budgets_evaluate(now=NOW)
    (view,) = budget_views(now=NOW)
    assert view.status.spent == pytest.approx(222) and view.status.level.value == "spent"
    # 72 device-hours in the trailing 3 days, whose only hours with telemetry are the last 24: 72 a day
    assert view.status.rate_per_day == pytest.approx(72.0)
    _hours(tiers.vision, tiers.flavor, NOW - timedelta(hours=72), 48, within=0)  # the flavor reported, idle
    budgets_evaluate(now=NOW)
    (view,) = budget_views(now=NOW)
    assert view.status.rate_per_day == pytest.approx(24.0)  # 72 over 72 hours with telemetry
    event = AuditEvent.objects.get(action="budget_exhausted")
    assert "acme/research/nlp spent its month budget on west/a100: 222 of 200 device-hours" in event.reason
    spend = BudgetSpend.objects.get()
    assert spend.exhausted_at == NOW and spend.released_at is None
    # raising it below the spend is refused with the figure (the service checks this period's spend)
    monkeypatch.setattr("quotas.services.budgets.timezone.now", lambda: NOW)
    with pytest.raises(PolicyViolationError) as caught:
        services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.nlp, 210))
    assert caught.value.violations[0].code is ViolationCode.BUDGET_BELOW_SPENT
    assert "already spent 222 device-hours" in caught.value.violations[0].message


def test_a_spent_hold_budget_stops_the_subtrees_local_queues_and_no_borrowing_zeroes_borrowing(tiers, crd_schemas):
    services.namespace_bind(actor=tiers.admin, reason="t", unit=tiers.nlp, cluster=tiers.cluster, namespace="nlp")
    services.namespace_bind(actor=tiers.admin, reason="t", unit=tiers.llm, cluster=tiers.cluster, namespace="llm")
    services.namespace_bind(actor=tiers.admin, reason="t", unit=tiers.vision, cluster=tiers.cluster, namespace="vis")
    services.budget_set(
        actor=tiers.admin, reason="t", change=change(tiers, tiers.nlp, 10, action="hold", tiers=["P0", "P1", "P2"])
    )
    services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.vision, 10, action="no-borrowing"))
    now = datetime.now(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    _hours(tiers.llm, tiers.flavor, start, 1, within=12)
    _hours(tiers.vision, tiers.flavor, start, 1, within=12)

    def compiled():
        objects = compile_kueue(org_snapshot(), kueue_target(tiers.cluster))
        assert validate_objects(objects, crd_schemas) == []
        return {(o["kind"], o["metadata"]["name"]): o.get("spec") for o in objects}

    before = compiled()
    assert "stopPolicy" not in before[("LocalQueue", "acme.research.nlp")]
    budgets_evaluate(now=now)
    after = compiled()
    assert after[("LocalQueue", "acme.research.nlp")]["stopPolicy"] == "Hold"
    assert after[("LocalQueue", "acme.research.nlp.llm")]["stopPolicy"] == "Hold"
    assert "stopPolicy" not in after[("LocalQueue", "acme.research.vision")]

    def gpu(spec):
        return spec["resourceGroups"][0]["flavors"][0]["resources"][0]

    assert gpu(before[("ClusterQueue", "acme.research.vision")])["borrowingLimit"] == "10"
    assert gpu(after[("ClusterQueue", "acme.research.vision")])["borrowingLimit"] == "0"
    assert gpu(after[("ClusterQueue", "acme.research.vision")])["nominalQuota"] == "20"
    # raised above its spend: released at the next evaluation, the queues run again
    services.budget_set(actor=tiers.admin, reason="more", change=change(tiers, tiers.nlp, 100))
    budgets_evaluate(now=now)
    assert "stopPolicy" not in compiled()[("LocalQueue", "acme.research.nlp")]
    assert AuditEvent.objects.filter(action="budget_released").count() == 1


def test_a_budget_starting_next_period_counts_nothing_yet(tiers):
    services.budget_set(
        actor=tiers.admin, reason="t", change=change(tiers, tiers.nlp, 10, action="hold", starts_on=date(2099, 1, 1))
    )
    assert budgets_evaluate(now=NOW) == {"budgets": 0}


def test_the_api_sets_lists_and_removes_budgets_and_names_bad_fields(tiers, client):
    client.force_login(tiers.admin)
    body = {"unit": "acme/research/nlp", "flavor": "west/a100", "device_hours": 800, "action": "hold",
            "reason": "q2 plan", "version": 0}  # fmt: skip
    made = client.post("/api/v1/budgets/", body, content_type="application/json")
    assert made.status_code == 201, made.content
    data = made.json()
    assert (data["unit_path"], data["device_hours"], data["action"], data["level"]) == (
        "acme/research/nlp",
        800,
        "hold",
        "ok",
    )
    assert data["tiers"] == ["P1", "P2"] and data["remaining"] == 800
    listed = client.get("/api/v1/budgets/", {"unit": "acme/research"}).json()
    assert [b["unit_path"] for b in listed] == ["acme/research/nlp"]
    bad = client.post(
        "/api/v1/budgets/", {**body, "carry_over_cap": 900, "version": 1}, content_type="application/json"
    )
    assert bad.status_code == 400 and "carry_over_cap" in bad.content.decode()
    no_reason = client.post("/api/v1/budgets/", {**body, "reason": "", "version": 1}, content_type="application/json")
    assert no_reason.status_code == 400 and "reason" in no_reason.json()
    gone = client.delete(
        f"/api/v1/budgets/{data['id']}/", {"reason": "not needed", "version": 1}, content_type="application/json"
    )
    assert gone.status_code == 204
    assert AuditEvent.objects.filter(action="budget_delete").count() == 1


@pytest.mark.parametrize("version", [None, "missing", "abc", "²", "٤٧", "４７", True, ""])
def test_a_budget_edit_without_the_version_it_was_made_on_is_refused_and_changes_nothing(tiers, client, version):
    """Issue #42: the budget API skipped the optimistic lock when the version was missing, null, "abc" or "²"
    (another person's change was overwritten); a version written with other digits than 0-9 read as a number."""
    from quotas.models import Budget

    client.force_login(tiers.admin)
    body = {"unit": "acme/research/nlp", "flavor": "west/a100", "device_hours": 800, "reason": "first", "version": 0}
    assert client.post("/api/v1/budgets/", body, content_type="application/json").status_code == 201
    theirs = client.post(
        "/api/v1/budgets/", {**body, "device_hours": 600, "version": 1}, content_type="application/json"
    )
    assert theirs.status_code == 201  # someone else's change: version 2 now
    mine = {**body, "device_hours": 900, "reason": "mine"}
    if version == "missing":
        del mine["version"]
    else:
        mine["version"] = version
    lost = client.post("/api/v1/budgets/", mine, content_type="application/json")
    assert lost.status_code == 400 and "version" in lost.json(), lost.content
    assert Budget.objects.get().device_hours == 600


def test_a_stale_edit_or_removal_of_a_budget_is_refused_and_bad_values_name_their_field(tiers, client):
    from quotas.models import Budget

    client.force_login(tiers.admin)
    body = {"unit": "acme/research/nlp", "flavor": "west/a100", "device_hours": 800, "reason": "first", "version": 0}
    made = client.post("/api/v1/budgets/", body, content_type="application/json").json()
    client.post("/api/v1/budgets/", {**body, "device_hours": 600, "version": 1}, content_type="application/json")
    stale = client.post(
        "/api/v1/budgets/", {**body, "device_hours": 900, "version": 1}, content_type="application/json"
    )
    assert stale.status_code == 412 and "changed since version 1" in stale.json()["detail"], stale.content
    url = f"/api/v1/budgets/{made['id']}/"
    removal = client.delete(url, {"reason": "old page", "version": 1}, content_type="application/json")
    assert removal.status_code == 412 and Budget.objects.get().device_hours == 600
    unsaid = client.delete(url, {"reason": "no version"}, content_type="application/json")
    assert unsaid.status_code == 400 and "version" in unsaid.json()
    for name, value in (("oversubscription", "NaN"), ("oversubscription", "Infinity"), ("starts_on", "9999-12-01"),
                        ("device_hours", "٤٧"), ("warn_percent", "４７"), ("carry_over_cap", True)):  # fmt: skip
        bad = client.post("/api/v1/budgets/", {**body, name: value, "version": 2}, content_type="application/json")
        assert bad.status_code == 400 and name in bad.json(), (name, value, bad.content)
    assert Budget.objects.get().version == 2


def test_a_lead_asks_for_their_own_units_budget_through_the_api(tiers, client):
    from django.contrib.auth.models import User

    from quotas.models import Budget, ChangeRequest

    lead = User.objects.create_user("lead-nlp")
    tiers.nlp.leads.add(lead)
    client.force_login(lead)
    body = {"unit": "acme/research/nlp", "flavor": "west/a100", "device_hours": 800, "reason": "q2 plan", "version": 0}
    refused = client.post("/api/v1/budgets/", body, content_type="application/json")
    assert refused.status_code == 403 and "change request" in refused.content.decode()
    asked = client.post("/api/v1/budgets/", {**body, "request": True}, content_type="application/json")
    assert asked.status_code == 202, asked.content
    request = ChangeRequest.objects.get(pk=asked.json()["change_request"])
    (item,) = request.changes
    assert item["kind"] == "budget" and item["device_hours"] == 800 and item["version"] == 0
    assert not Budget.objects.exists()
    services.change_request_approve(actor=tiers.admin, request=request)
    assert Budget.objects.get().device_hours == 800


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_evaluating_at_once_record_and_audit_running_out_once(tiers):
    """Beat's evaluation after a rollup and a retried one may run on two workers together: the
    budgets are locked while their period is recorded, so the second sees the first's row."""
    from django.db import connection

    from tests.quotas.test_concurrency import _race

    assert connection.vendor == "postgresql"
    services.budget_set(actor=tiers.admin, reason="t", change=change(tiers, tiers.nlp, 10, action="hold"))
    now = datetime.now(UTC)
    _hours(tiers.nlp, tiers.flavor, now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), 1, within=12)
    outcomes = _race([lambda: budgets_evaluate(now=now)] * 4)
    assert outcomes == ["ok"] * 4
    assert BudgetSpend.objects.count() == 1
    assert AuditEvent.objects.filter(action="budget_exhausted").count() == 1


def test_a_spent_hold_budget_reaches_the_api_server_and_a_raise_releases_it(demo, crd_schemas):
    """Through the official client against the loopback API server the other sync tests use: the held
    LocalQueue is written with stopPolicy Hold and the run says why; raised, the next sync lifts it."""
    from quotas.models import NamespaceBinding, Quota, ResourceFlavor, SyncObject, WorkloadTier
    from tests.kube_fake import FakeKueueServer
    from tests.quotas.test_sync import sync

    rl = Quota.objects.select_related("unit").get(
        unit__path="acme/research/rl", flavor__name="a100-80gb", resource="nvidia.com/gpu"
    )
    flavor = ResourceFlavor.objects.get(pk=rl.flavor_id)
    namespaces = set(NamespaceBinding.objects.filter(unit=rl.unit, cluster=demo).values_list("namespace", flat=True))
    assert namespaces, "the demo binds rl's namespaces"
    every_tier = sorted(WorkloadTier.objects.values_list("name", flat=True))
    bump = BudgetChange(rl.unit_id, flavor.pk, device_hours=5, action="hold", tiers=every_tier)
    services.budget_set(actor=None, reason="t", change=bump)
    now = datetime.now(UTC)
    UsageHour.objects.create(
        unit=rl.unit, flavor=flavor, hour=now.replace(day=1, hour=0, minute=0, second=0, microsecond=0),
        minutes=60, allocated=8, within=8,
    )  # fmt: skip
    with FakeKueueServer(crd_schemas) as fake:
        sync(demo, fake)
        budgets_evaluate(now=now)
        held = sync(demo, fake)
        assert "held: budget spent — acme/research/rl on k8s-west/a100-80gb" in held.message, held.message
        changed = SyncObject.objects.filter(run=held, kind="LocalQueue", outcome="updated")
        assert {o.namespace for o in changed} == namespaces
        for ns in namespaces:
            assert fake.objects[("LocalQueue", ns, next(iter(fake_names(fake, ns))))]["spec"]["stopPolicy"] == "Hold"
        services.budget_set(actor=None, reason="more", change=BudgetChange(rl.unit_id, flavor.pk, device_hours=100))
        budgets_evaluate(now=now)
        released = sync(demo, fake)
        assert "held: budget spent" not in released.message
        for ns in namespaces:
            spec = fake.objects[("LocalQueue", ns, next(iter(fake_names(fake, ns))))]["spec"]
            assert spec.get("stopPolicy", "None") == "None", spec


def fake_names(fake, namespace):
    return {name for kind, ns, name in fake.objects if kind == "LocalQueue" and ns == namespace}
