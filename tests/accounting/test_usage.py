"""The usage layer on the database: replay loads, rollups in SQL held to the pure attribution rule,
idempotence, gaps, bad input, and the API. Runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum
from django.test import Client

from accounting.models import SourceStatus, UsageHour, UsageSample, WorkloadRecord
from accounting.policy.attribution import UnitInterval, attribute
from accounting.services import usage_ingest_slurm, usage_replay_load, usage_rollup

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
HEADER = "minute,unit,flavor,quota,held,queued"


def replay(rows):
    return [HEADER, *(f"{at:%Y-%m-%dT%H:%M},{u},{f},{q},{h},{w}" for at, u, f, q, h, w in rows)]


def random_rows(seed=7, minutes=150):
    """nlp (30, lends 15), vision (20, lends 10) and ops (30, lends 0) on west/a100 (120 devices),
    each borrowing now and then."""
    rng = random.Random(seed)
    quotas = {"nlp": 30, "vision": 20, "ops": 30}
    rows = []
    for i in range(minutes):
        at = T0 + timedelta(minutes=i)
        for unit, quota in quotas.items():
            if unit == "vision" and 40 <= i < 55:
                continue  # a telemetry gap
            rows.append((at, unit, "a100", quota, rng.choice([0, 5, quota, quota + 25, quota + 60]), rng.randint(0, 9)))
    return rows


def test_rollups_in_sql_match_the_attribution_rule_minute_by_minute(org):
    units = {"nlp": org.nlp, "vision": org.vision, "ops": org.ops}
    rows = random_rows()
    run = usage_replay_load(lines=replay(rows), cluster=org.cluster, units=units, name="random")
    assert run.status == SourceStatus.OK and run.counts["rows"] == len(rows) and run.counts["gap_minutes"] == 15
    usage_rollup(start=T0, end=T0 + timedelta(hours=3))
    lendable = {"nlp": 15, "vision": 10, "ops": 0}
    expected: dict[tuple[str, datetime], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_minute: dict[datetime, dict[str, UnitInterval]] = defaultdict(dict)
    for at, unit, _, quota, held, queued in rows:
        by_minute[at][unit] = UnitInterval(quota, lendable[unit], held, queued)
    for at, interval in by_minute.items():
        for unit, part in attribute(interval, org.flavor.physical_devices).items():
            totals = expected[(unit, at.replace(minute=0))]
            totals["within"] += part.within / 60
            totals["borrowed"] += part.borrowed / 60
            totals["lent"] += part.lent / 60
            totals["minutes"] += 1
    found = {(h.unit.slug, h.hour): h for h in UsageHour.objects.select_related("unit")}
    assert set(found) == set(expected)
    for key, totals in expected.items():
        hour = found[key]
        assert hour.minutes == totals["minutes"]
        assert hour.within == pytest.approx(totals["within"]) and hour.borrowed == pytest.approx(totals["borrowed"])
        assert hour.lent == pytest.approx(totals["lent"]), key
        assert hour.allocated == pytest.approx(hour.within + hour.borrowed)
    assert sum(h.lent for h in found.values()) > 0  # the random month did lend


def test_loading_and_rolling_up_twice_changes_nothing(org):
    units = {"nlp": org.nlp, "vision": org.vision, "ops": org.ops}
    rows = random_rows(minutes=90)
    for _ in range(2):
        usage_replay_load(lines=replay(rows), cluster=org.cluster, units=units, name="twice")
        usage_rollup(start=T0, end=T0 + timedelta(hours=2))
    assert UsageSample.objects.count() == len(rows)
    first = sorted(UsageHour.objects.values_list("unit_id", "hour", "allocated", "lent"))
    usage_rollup(start=T0, end=T0 + timedelta(hours=2))
    assert sorted(UsageHour.objects.values_list("unit_id", "hour", "allocated", "lent")) == first
    corrected = [(at, u, f, q, 0 if u == "ops" else h, w) for at, u, f, q, h, w in rows]  # a corrected file
    usage_replay_load(lines=replay(corrected), cluster=org.cluster, units=units, name="corrected")
    usage_rollup(start=T0, end=T0 + timedelta(hours=2))
    assert sum(UsageHour.objects.filter(unit=org.ops).values_list("allocated", flat=True)) == 0
    assert UsageSample.objects.count() == len(rows)


def test_a_rollup_leaves_hours_outside_its_window_alone(org):
    units = {"nlp": org.nlp}
    usage_replay_load(lines=replay(random_rows(minutes=180)), cluster=org.cluster, units=units, name="w")
    usage_rollup(start=T0, end=T0 + timedelta(hours=3))
    before = UsageHour.objects.filter(hour=T0).get()
    UsageSample.objects.filter(at__lt=T0 + timedelta(hours=1)).update(held=0)
    usage_rollup(start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=3))
    assert UsageHour.objects.filter(hour=T0).get().allocated == before.allocated


def test_bad_lines_unknown_units_and_flavors_are_counted_and_kept_not_dropped_silently(org):
    lines = [*replay(random_rows(minutes=5)), "2026-11-02T10:09,nlp,a100,30,-4,0", "2026-11-02T10:09,ghost,a100,1,1,0"]
    lines.append("2026-11-02T10:09,nlp,h200,8,1,0")
    run = usage_replay_load(lines=lines, cluster=org.cluster, units={"nlp": org.nlp}, name="bad")
    assert run.status == SourceStatus.PARTIAL
    assert run.counts["problems"] == 1 and run.problems[0]["line"] == 17 and "negative" in run.problems[0]["error"]
    assert run.counts["unknown_unit"] == 11 and "ghost" in run.message  # vision, ops and ghost rows
    assert run.counts["unknown_flavor"] == 1


SACCT = [
    "101|500|lab|nlp|alice|guar-nlp|gpu|COMPLETED|2026-11-02T09:58:00|2026-11-02T10:00:00|2026-11-02T11:30:00|cpu=1,gres/gpu:a100=2|0:0",
    "102|501|lab|nlp|alice|burst-nlp|gpu|PREEMPTED|2026-11-02T10:05:00|2026-11-02T10:10:00|2026-11-02T10:40:00|cpu=1,gres/gpu:a100=4|0:0",
    "102|502|lab|nlp|alice|burst-nlp|gpu|COMPLETED|2026-11-02T10:40:00|2026-11-02T10:50:00|2026-11-02T11:10:00|cpu=1,gres/gpu:a100=4|0:0",
    "103|503|lab|someone-else|zed|normal|gpu|FAILED|2026-11-02T10:00:00|2026-11-02T10:00:00|2026-11-02T10:01:00|gres/gpu=1|1:0",
    "104|504|lab|vision|bob|guar-vision|gpu|RUNNING|2026-11-02T10:00:00|2026-11-02T10:30:00|Unknown|gres/gpu:a100=1|0:0",
    "broken line",
]  # fmt: skip


@pytest.fixture
def lab_flavor(org):
    from quotas import services

    return services.flavor_set(
        actor=org.admin, reason="t", cluster=org.slurm, name="a100", accelerator_model="A100",
        device_memory_gb=80, physical_devices=8,
    )  # fmt: skip


def test_sacct_records_each_job_once_with_its_runs_and_says_what_it_could_not_map(org, lab_flavor):
    now = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
    run = usage_ingest_slurm(cluster=org.slurm, lines=SACCT, now=now)
    assert run.status == SourceStatus.PARTIAL and run.counts["jobs"] == 4 and run.counts["problems"] == 1
    assert run.problems[0]["line"] == 6 and "fields" in run.problems[0]["error"]
    assert run.counts["unresolved_account"] == 1 and "someone-else" in run.message
    records = {r.job_id: r for r in WorkloadRecord.objects.all()}
    assert records["102"].scheduler_id == "102@2026-11-02T10:05:00"
    assert records["103"].unit is None and records["103"].flavor == lab_flavor  # kept, counted; one-flavor cluster
    burst = records["102"]
    assert (burst.unit, burst.state, burst.borrowed, burst.devices) == (org.nlp, "finished", 4, 4)
    assert burst.evictions == [{"reason": "PREEMPTED", "at": "2026-11-02T10:40:00+00:00"}]
    assert burst.allocations.count() == 2 and burst.held_seconds == 30 * 60 + 20 * 60
    assert records["104"].ended_at is None and records["104"].state == "running"
    again = usage_ingest_slurm(cluster=org.slurm, lines=SACCT, now=now)
    assert again.counts["jobs"] == 4 and WorkloadRecord.objects.count() == 4  # the same window twice: no change
    assert sum(r.allocations.count() for r in WorkloadRecord.objects.all()) == 5
    assert again.window_start == now - timedelta(hours=1)  # from the last watermark, minus the overlap


def test_a_requeued_run_read_by_a_later_ingest_joins_its_job(org, lab_flavor):
    """The first run was preempted at 10:40; the requeued run ends at 14:10 and the 14:00 ingest no
    longer sees the first (it ended before its window): the record still has both runs."""
    first, second = SACCT[1], SACCT[2].replace("11:10:00", "14:10:00").replace("10:50:00", "13:50:00")
    usage_ingest_slurm(cluster=org.slurm, lines=[first], now=datetime(2026, 11, 2, 11, 0, tzinfo=UTC))
    assert WorkloadRecord.objects.get().state == "preempted"
    usage_ingest_slurm(cluster=org.slurm, lines=[second], now=datetime(2026, 11, 2, 14, 30, tzinfo=UTC))
    record = WorkloadRecord.objects.get()
    assert record.state == "finished" and record.allocations.count() == 2
    assert [e["reason"] for e in record.evictions] == ["PREEMPTED"] and record.held_seconds == 30 * 60 + 20 * 60
    assert record.admitted_at == datetime(2026, 11, 2, 10, 10, tzinfo=UTC)


def test_the_usage_api_groups_and_says_how_much_had_telemetry(org, admin_client: Client):
    usage_replay_load(
        lines=replay(random_rows()), cluster=org.cluster, units={"nlp": org.nlp, "vision": org.vision}, name="api"
    )
    usage_rollup(start=T0, end=T0 + timedelta(hours=3))
    answer = admin_client.get(
        "/api/v1/usage/",
        {"within": "acme/research", "group_by": "unit", "start": "2026-11-02T10:00:00Z", "end": "2026-11-02T13:00:00Z"},
    )
    assert answer.status_code == 200
    rows = {r["unit_path"]: r for r in answer.json()}
    assert set(rows) == {"acme/research/nlp", "acme/research/vision"}
    assert rows["acme/research/vision"]["gap_minutes"] == 30 + 15  # 150 of 180 minutes loaded, 15 missing inside
    assert rows["acme/research/nlp"]["active_h"] is None  # not measured: null, never zero
    bad = admin_client.get("/api/v1/usage/", {"group_by": "team"})
    assert bad.status_code == 400 and "unknown grouping team" in str(bad.json()["group_by"])


def test_a_day_without_telemetry_is_a_row_with_its_gap_and_months_say_their_coverage(org, admin_client: Client):
    """Issue #27.8: grouped by day the API dropped a day without telemetry, grouped by month it said
    nothing of coverage; and it shows the share of minutes held at ≥ 90 % of the guarantee."""
    days = [T0, T0 + timedelta(days=2)]  # 3 and 4 November have nothing
    rows = [(d + timedelta(minutes=i), "nlp", "a100", 30, 28 if i < 30 else 10, 0) for d in days for i in range(60)]
    usage_replay_load(lines=replay(rows), cluster=org.cluster, units={"nlp": org.nlp}, name="gaps")
    usage_rollup(start=T0, end=T0 + timedelta(days=3))
    window = {"within": "acme/research/nlp", "start": "2026-11-02T00:00:00Z", "end": "2026-11-05T00:00:00Z"}
    by_day = admin_client.get("/api/v1/usage/", {**window, "group_by": "day"}).json()
    assert [r["period"][:10] for r in by_day] == ["2026-11-02", "2026-11-03", "2026-11-04"]
    gap = by_day[1]
    assert gap["coverage"] == 0 and gap["gap_minutes"] == 1440 and gap["allocated_h"] is None
    assert by_day[0]["full_share"] == 0.5  # 28 of 30 is ≥ 90 %; 10 of 30 is not
    (month,) = admin_client.get("/api/v1/usage/", {"within": "acme/research/nlp", "group_by": "month"}).json()
    assert month["coverage"] == round(120 / (30 * 1440), 4) and month["gap_minutes"] == 30 * 1440 - 120


def test_the_tasks_ingest_every_enabled_slurm_cluster_and_rebuild_recent_rollups(org, lab_flavor, settings):
    from accounting.models import SourceRun
    from accounting.tasks import ingest_all_slurm, rollup_recent
    from config.celery import app

    settings.ALLOT_SLURM_SACCT = "/nonexistent/sacct"  # a site whose Slurm client is missing
    eager, app.conf.task_always_eager = app.conf.task_always_eager, True  # the queued ingest runs here
    try:
        assert ingest_all_slurm() == [org.slurm.pk]
    finally:
        app.conf.task_always_eager = eager
    run = SourceRun.objects.get(cluster=org.slurm)
    assert run.status == SourceStatus.FAILED and "not installed" in run.message and run.watermark is None
    usage_replay_load(lines=replay(random_rows(minutes=30)), cluster=org.cluster, units={"nlp": org.nlp}, name="t")
    assert rollup_recent(hours=24 * 40) == 1 and UsageHour.objects.get().minutes == 30


def test_the_sources_page_shows_each_sources_last_run_its_problems_and_watermark(org, lab_flavor, admin_client):
    usage_replay_load(lines=[*replay(random_rows(minutes=3)), "2026-11-02T10:09,nlp,a100,30,-4,0"], cluster=org.cluster,
                      units={"nlp": org.nlp}, name="week.csv")  # fmt: skip
    usage_ingest_slurm(cluster=org.slurm, lines=SACCT, now=datetime(2026, 11, 2, 12, 0, tzinfo=UTC))
    page = admin_client.get("/usage/sources/").content.decode()
    assert "Replay file" in page and "week.csv" in page and "cannot be negative" in page
    assert "Slurm (sacct)" in page and "accounts that map to no unit: someone-else" in page
    assert "2026-11-02 12:00 UTC" in page  # the Slurm watermark
    assert "unresolved_account 1" in page


def test_a_units_page_draws_its_use_per_day_with_gaps_marked(org, admin_client):
    rows = [r for r in random_rows(minutes=60) if r[1] == "nlp"]
    later = [(at + timedelta(days=2), u, f, q, h, w) for at, u, f, q, h, w in rows]  # a day with nothing between
    usage_replay_load(lines=replay(rows + later), cluster=org.cluster, units={"nlp": org.nlp}, name="days")
    usage_rollup(start=T0, end=T0 + timedelta(days=3))
    page = admin_client.get(f"/units/{org.nlp.pk}/").content.decode()
    assert "Use over time" in page and "GPUs over 31 days" in page
    assert page.count("no telemetry (a gap, not idle)") == 29  # 31 days shown, 2 with data
    held = sum(UsageHour.objects.filter(unit=org.nlp, hour=T0).values_list("allocated", flat=True))
    assert f"held {held:.1f}" in page  # each day's numbers are on the chart
    assert "activity not measured (no DCGM source)" in page and 'class="active"' not in page
    full = UsageHour.objects.filter(unit=org.nlp).aggregate(f=Sum("minutes_full"), m=Sum("minutes"))
    assert f"At ≥ 90 % of the guarantee {round(100 * full['f'] / full['m'])} % of the time" in page  # issue #26.6
    assert "Use over time" not in admin_client.get(f"/units/{org.ops.pk}/").content.decode()  # no usage: no chart


def test_a_units_chart_by_week_and_month_with_measured_activity(org, admin_client):
    from accounting.models import ActivityHour

    rows = [r for r in random_rows(minutes=60) if r[1] == "nlp"]
    usage_replay_load(lines=replay(rows), cluster=org.cluster, units={"nlp": org.nlp}, name="hour")
    ActivityHour.objects.create(cluster=org.cluster, unit=org.nlp, flavor=org.flavor, hour=T0, active=12.5, observed=30)
    usage_rollup(start=T0, end=T0 + timedelta(hours=1))
    assert UsageHour.objects.get(unit=org.nlp, hour=T0).active == 12.5
    weeks = admin_client.get(f"/units/{org.nlp.pk}/", {"usage": "week"}).content.decode()
    assert "GPUs over 26 weeks" in weeks and "week of 2026-11-02: held" in weeks  # 2 Nov 2026 is a Monday
    assert "active 12.5 (measured)" in weeks and weeks.count('class="active"') == 1
    months = admin_client.get(f"/units/{org.nlp.pk}/", {"usage": "month"}).content.decode()
    assert "GPUs over 12 months" in months and "month of 2026-11-01: held" in months and "Sep 2026" in months
    assert "GPUs over 31 days" in admin_client.get(f"/units/{org.nlp.pk}/", {"usage": "year"}).content.decode()
    metrics = admin_client.get("/metrics/usage").content.decode()
    org_labels = 'cost_centre="",department="research",flavor="a100",kueue_unit="acme.research.nlp"'
    assert f'allot_unit_active{{cluster="west",{org_labels},unit="acme/research/nlp"}} 12.5' in metrics


def test_prometheus_sees_the_latest_hour_and_the_grafana_dashboard_asks_only_for_what_is_exported(
    org, client, settings
):
    import json
    import re
    from pathlib import Path

    settings.ALLOT_METRICS_TOKEN = "scrape-me"
    usage_replay_load(lines=replay(random_rows(minutes=90)), cluster=org.cluster, units={"nlp": org.nlp}, name="m")
    usage_rollup(start=T0, end=T0 + timedelta(hours=2))
    assert client.get("/metrics/usage").status_code == 401
    text = client.get("/metrics/usage", headers={"Authorization": "Bearer scrape-me"}).content.decode()
    last = UsageHour.objects.get(unit=org.nlp, hour=T0 + timedelta(hours=1))
    labels = (
        'cluster="west",cost_centre="",department="research",flavor="a100",kueue_unit="acme.research.nlp",'
        'unit="acme/research/nlp"'
    )
    found = re.search(rf"^allot_unit_allocated{{{labels}}} (\S+)$", text, re.M)
    assert found and float(found[1]) == pytest.approx(last.allocated / (last.minutes / 60))  # devices, 30 minutes
    stamp = re.search(r"^allot_usage_hour_timestamp_seconds (\S+)$", text, re.M)
    assert stamp and float(stamp[1]) == (T0 + timedelta(hours=1)).timestamp()
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "deploy/grafana/allot-usage.json").read_text())
    asked = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"allot_[a-z_]+", t["expr"])}
    exported = set(re.findall(r"^# TYPE (allot_[a-z_]+) gauge", text, re.M))
    assert asked and asked <= exported
    # the Kueue panels join on the labels Kueue's configuration promotes and Allot's series carry
    from quotas.policy.kueue.config import custom_labels

    promoted = {f"custom_{c['name']}" for c in custom_labels()}
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    used = set(re.findall(r"custom_[a-z_]+", exprs))
    assert used and used <= promoted
    assert "kueue_unit" in exprs and all(f'{label}="' in text for label in ("department", "kueue_unit", "cost_centre"))


def test_productive_is_an_estimate_labelled_as_such_and_evictions_lose_up_to_a_checkpoint(org, lab_flavor):
    usage_replay_load(lines=replay(random_rows(minutes=60)), cluster=org.cluster, units={"nlp": org.nlp}, name="p")
    usage_rollup(start=T0, end=T0 + timedelta(hours=1))
    hour = UsageHour.objects.get(unit=org.nlp, flavor=org.flavor)
    assert hour.productive_estimated and hour.productive == hour.allocated  # nothing was evicted
    assert hour.active is None  # not measured: empty, never zero


@pytest.mark.postgres
def test_a_preempted_run_loses_the_work_since_its_last_checkpoint(org, lab_flavor):
    usage_ingest_slurm(cluster=org.slurm, lines=SACCT, now=datetime(2026, 11, 2, 12, 0, tzinfo=UTC))
    usage_rollup(start=T0, end=T0 + timedelta(hours=2), now=datetime(2026, 11, 2, 12, 0, tzinfo=UTC))
    hour = UsageHour.objects.get(unit=org.nlp, flavor=lab_flavor, hour=T0)
    # job 102 (4 GPUs) was preempted at 10:40 after 30 minutes; the standard contract checkpoints every 15 minutes
    assert hour.productive_estimated and hour.productive == pytest.approx(hour.allocated - 4 * 15 / 60)
    later = UsageHour.objects.get(unit=org.nlp, flavor=lab_flavor, hour=T0 + timedelta(hours=1))
    assert later.productive == pytest.approx(later.allocated)


def _partitions():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'accounting_usagehour'::regclass ORDER BY 1"
        )
        return [name for (name,) in cursor.fetchall()]


def _rows():
    return sorted(
        UsageHour.objects.values_list("unit_id", "flavor_id", "hour", "minutes", "guarantee", "allocated", "borrowed")
    )


@pytest.mark.postgres
def test_a_whole_month_is_rebuilt_as_its_own_partition_with_the_same_rows_as_an_in_place_rollup(org, lab_flavor):
    now = datetime(2026, 12, 1, tzinfo=UTC)
    usage_ingest_slurm(cluster=org.slurm, lines=SACCT, now=datetime(2026, 11, 2, 12, 0, tzinfo=UTC))
    november = datetime(2026, 11, 1, tzinfo=UTC)
    stray = {"unit": org.nlp, "flavor": lab_flavor, "minutes": 60, "guarantee": 1, "allocated": 1, "within": 1}
    UsageHour.objects.create(hour=datetime(2026, 11, 20, tzinfo=UTC), **stray)  # no partition yet: the default
    assert "accounting_usagehour_p202611" not in _partitions()

    usage_rollup(start=T0 - timedelta(hours=2), end=T0 + timedelta(hours=4), now=now)  # part of the month: in place
    assert "accounting_usagehour_p202611" in _partitions()  # created, and the stray row moved into it
    assert UsageHour.objects.filter(hour=datetime(2026, 11, 20, tzinfo=UTC)).count() == 1  # outside the window
    in_place = [r for r in _rows() if T0 - timedelta(hours=2) <= r[2] < T0 + timedelta(hours=4)]
    assert sum(r[5] for r in in_place) == pytest.approx(
        2 * 1.5 + 4 * (30 + 20) / 60 + 1 * 3.5
    )  # jobs 101, 102, 104 (running)

    rows = usage_rollup(start=november, end=datetime(2026, 12, 1, tzinfo=UTC), now=now)  # the whole month: swapped
    whole = _rows()
    assert (
        rows == len(whole)
        and UsageHour.objects.filter(hour=datetime(2026, 11, 20, tzinfo=UTC), guarantee=1).count() == 0
    )
    assert [r for r in whole if T0 - timedelta(hours=2) <= r[2] < T0 + timedelta(hours=4)] == in_place
    assert all(november <= r[2] < now for r in whole) and whole[-1][2] == now - timedelta(hours=1)  # 104 still runs
    assert usage_rollup(start=november, end=datetime(2026, 12, 1, tzinfo=UTC), now=now) == rows and _rows() == whole
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM accounting_usagehour_default WHERE hour >= %s", [november])
        assert cursor.fetchone()[0] == 0
    assert "accounting_usagehour_p202611_new" not in _partitions()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_month_built_by_several_connections_side_by_side_equals_the_one_built_in_one_transaction(
    org, lab_flavor, settings, monkeypatch
):
    from django.db import transaction

    from accounting.services import rollup

    side_by_side, ran = rollup._side_by_side, []

    def counted(statements):
        ran.append(len(statements))
        side_by_side(statements)

    monkeypatch.setattr(rollup, "_side_by_side", counted)

    from quotas import services
    from quotas.policy import Resource

    guarantees = ((org.acme, 4), (org.research, 3), (org.nlp, 2), (org.vision, 1), (org.llm, 1))
    for unit, guarantee in guarantees:  # top down; units on both shards of two workers
        services.quota_set(
            actor=org.admin, reason="t", unit_id=unit.pk, flavor_id=lab_flavor.pk, resource=Resource.GPU,
            guarantee=guarantee,
        )  # fmt: skip
    usage_ingest_slurm(cluster=org.slurm, lines=SACCT, now=datetime(2026, 11, 2, 12, 0, tzinfo=UTC))
    november, december = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    with transaction.atomic():  # inside a transaction: one connection, as the other tests do
        serial = usage_rollup(start=november, end=december, now=december)
    one = _rows()
    settings.ALLOT_USAGE_ROLLUP_WORKERS = 2
    assert not ran
    assert usage_rollup(start=november, end=december, now=december) == serial  # outside one: two workers
    assert ran == [2, 2]  # the two shares of the units, then the two indexes
    assert _rows() == one and {r[0] for r in one} == {u.pk for u, _ in guarantees}
    assert sum(r[4] for r in one) == pytest.approx(11 * (24 + 12))  # guarantee-hours up to the watermark
    assert sum(r[5] for r in one) > 0
    assert "accounting_usagehour_p202611" in _partitions() and "accounting_usagehour_p202611_new" not in _partitions()
