"""Benchmark showback and the detectors on PostgreSQL.

    python bench/accounting.py

A month of hourly rollups for 1,000 teams × 4 GPU types (2,976,000 unit-flavor-hours, written by one
INSERT … SELECT over generate_series in a database of its own: allot_bench on the PostgreSQL of
DATABASE_URL, or 127.0.0.1): one team in ten nearly idle, one in ten queuing above its guarantee, the
rest busy. Then: the month's showback (every unit, rolled up the tree), every detector over the same
month, and the number of queries one showback API page costs. Prints the figures; the LAST line is
key=value: showback_month_s, detect_month_s, api_queries, findings, units, hours.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.benchdb import database_url, setup_database  # noqa: E402

UNITS, TYPES = 1000, ("a100", "h100", "l40s", "v100")
MONTH = datetime(2026, 10, 1, tzinfo=UTC)
END = datetime(2026, 11, 1, tzinfo=UTC)

FILL = """
INSERT INTO accounting_usagehour (unit_id, flavor_id, hour, minutes, guarantee, allocated, within, borrowed, lent,
                                  pending, active, productive, productive_estimated, minutes_full, minutes_queued)
SELECT u.id, f.id, h, 60, 8, a, LEAST(a, 8), GREATEST(a - 8, 0), 0, p, NULL, a, TRUE, 0, 0
FROM quotas_orgunit u
CROSS JOIN quotas_resourceflavor f
CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 hour', interval '1 hour') AS h
CROSS JOIN LATERAL (
  SELECT CASE WHEN u.id %% 10 = 0 THEN random() * 1.0
              WHEN u.id %% 10 = 1 THEN 8.0
              ELSE random() * 9 END AS a,
         CASE WHEN u.id %% 10 = 1 THEN 4 + random() * 4 ELSE 0 END AS p
  WHERE h IS NOT NULL  -- per hour, not one value per unit
  OFFSET 0
) v
WHERE u.depth = 2
"""


def organisation() -> None:
    """1,000 teams under one department, a guarantee of 8 on each GPU type, priced (bulk rows: the
    bench's fixture, not what it measures)."""
    from quotas.models import Cluster, ClusterKind, OrgUnit, Quota, ResourceFlavor

    cluster = Cluster.objects.create(name="lab", kind=ClusterKind.SLURM, connection_ref="slurm:lab")
    flavors = [
        ResourceFlavor.objects.create(
            cluster=cluster,
            name=t,
            accelerator_model=t,
            device_memory_gb=80,
            physical_devices=10 * UNITS,
            headroom_devices=UNITS,
            price_per_device_hour="2.4900",
        )
        for t in TYPES
    ]
    org = OrgUnit.objects.create(kind="organisation", slug="acme", name="Acme", path="acme", depth=0)
    dept = OrgUnit.objects.create(kind="department", slug="d", name="D", parent=org, path="acme/d", depth=1)
    teams = OrgUnit.objects.bulk_create(
        OrgUnit(kind="team", slug=f"t{i:04d}", name=f"team {i}", parent=dept, path=f"acme/d/t{i:04d}", depth=2)
        for i in range(UNITS)
    )
    Quota.objects.bulk_create(
        Quota(unit=u, flavor=f, resource="nvidia.com/gpu", guarantee=8 * UNITS if u.depth < 2 else 8)
        for u in [org, dept, *teams]
        for f in flavors
    )


def main() -> None:
    url = database_url("accounting")
    setup_database(url)

    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from accounting.models import Finding, UsageHour
    from accounting.policy.findings import Thresholds
    from accounting.selectors.showback import showback_period, showback_report
    from accounting.services.findings import findings_detect
    from accounting.services.usage_version import usage_changed

    organisation()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"start": MONTH, "end": END})
        cursor.execute("ANALYZE accounting_usagehour")
    usage_changed()  # usage written outside Allot's services: what is cached from the old rows is not served
    hours = UsageHour.objects.count()
    filled = time.perf_counter() - started
    print(f"{hours:,} unit-flavor-hours for {UNITS} teams × {len(TYPES)} GPU types in {filled:.1f} s")

    started = time.perf_counter()
    report = showback_report(showback_period("2026-10"))
    showback_s = time.perf_counter() - started
    print(f"showback of the month: {len(report['lines']):,} lines (rolled up) in {showback_s:.2f} s")

    started = time.perf_counter()
    run = findings_detect(end=END, now=END, th=Thresholds(idle_window_days=31, reservation_window_days=31))
    detect_s = time.perf_counter() - started
    print(f"detectors over the month: {run.found} in {detect_s:.2f} s")

    staff = User.objects.create_user("bench", is_staff=True)
    client = Client()
    client.force_login(staff)
    with CaptureQueriesContext(connection) as queries:
        answer = client.get("/api/v1/showback/", {"month": "2026-10"})
    assert answer.status_code == 200, answer.content[:300]
    print(f"one showback API page: {len(queries)} queries (sessions and auth included)")
    print(
        f"showback_month_s={showback_s:.2f} detect_month_s={detect_s:.2f} api_queries={len(queries)} "
        f"findings={Finding.objects.count()} units={UNITS} hours={hours}"
    )


if __name__ == "__main__":
    main()
