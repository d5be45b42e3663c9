"""Benchmark waiting, explained (issue #44.7): one explanation on a cluster of 2,000 ClusterQueues and 10,000
pending Workloads, as the API and ``kubectl allot why`` ask for it.

    python bench/waiting.py

On PostgreSQL (a database of its own, allot_bench): 1 organisation, 20 departments, 2,000 teams (each a
ClusterQueue: a namespace bound to it) with a guarantee and a burst on 4 flavors; the watcher's live state
as it keeps it: 10,000 waiting Workloads (5 a team, each with its ask and Kueue's message) and 6,000
admitted ones (3 a team, some borrowing). ``explain_p50_ms`` / ``explain_p95_ms``: 200 explanations of
waiting Workloads picked at random, each as the API runs it (find the record by its job's name, read the
live view and the tree, explain, check the ways out against the invariants); the goal is p95 ≤ 200 ms.
``floor_ms``: the p50 of the one read every answer must make in the same run (the cluster's admitted
records: what each holds), and ``explain_ratio`` the p95 against it. ``unit_ms``: a team's Waiting now
panel (its 5 waiting Workloads).

The estimate's calibration (accounting.policy.estimate): a simulated month — each flavor a first-come
first-served queue of 32 GPUs at 85 % load, jobs of 1 GPU arriving at random (Poisson) and running 2 h on
average (exponential), from 2,000 teams — replayed in submission order as the service replays a site's
records: ``calibration_share`` is the share of jobs that started inside the band they would have been
given at submission (the band is the 10th to 90th percentile: 0.8 is calibrated), ``calibrate_s`` the
replay's time. A site's own figure is in every answer (``calibration``), from its own records.

Prints the figures; the LAST line is key=value pairs.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.benchdb import database_url, setup_database  # noqa: E402

TEAMS, DEPTS, FLAVORS = 2_000, 20, ("a100", "h100", "l40s", "v100")
PENDING_PER_TEAM, RUNNING_PER_TEAM, ASKS = 5, 3, 200
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
HOLDING = ("job_id", "unit_id", "unit__path", "owner", "tier", "flavor_name", "devices", "borrowed", "admitted_at")


def cluster() -> list[int]:
    """The bench's rows (its fixture, not what it measures), in bulk. Returns the teams' ids."""
    from accounting.models import WorkloadRecord
    from quotas.models import Cluster, ClusterKind, NamespaceBinding, OrgUnit, Quota, ResourceFlavor

    west = Cluster.objects.create(name="west", kind=ClusterKind.KUBERNETES, connection_ref="kubeconfig:/dev/null")
    flavors = [
        ResourceFlavor.objects.create(
            cluster=west, name=f, accelerator_model=f, device_memory_gb=80, physical_devices=8 * TEAMS,
            node_labels={"gpu": f}, queue_order=i,
        )
        for i, f in enumerate(FLAVORS)
    ]  # fmt: skip
    org = OrgUnit.objects.create(kind="organisation", slug="acme", name="Acme", path="acme", depth=0)
    depts = OrgUnit.objects.bulk_create(
        OrgUnit(kind="department", slug=f"d{d}", name=f"D{d}", parent=org, path=f"acme/d{d}", depth=1)
        for d in range(DEPTS)
    )
    teams = OrgUnit.objects.bulk_create(
        OrgUnit(kind="team", slug=f"t{i:04d}", name=f"team {i}", parent=depts[i % DEPTS],
                path=f"acme/d{i % DEPTS}/t{i:04d}", depth=2)
        for i in range(TEAMS)
    )  # fmt: skip
    gpu = "nvidia.com/gpu"
    quotas = [Quota(unit=org, flavor=f, resource=gpu, guarantee=8 * TEAMS) for f in flavors]
    quotas += [Quota(unit=d, flavor=f, resource=gpu, guarantee=8 * TEAMS // DEPTS) for d in depts for f in flavors]
    quotas += [Quota(unit=t, flavor=f, resource=gpu, guarantee=4, burst=4, lendable=4) for t in teams for f in flavors]
    Quota.objects.bulk_create(quotas)
    NamespaceBinding.objects.bulk_create(
        NamespaceBinding(cluster=west, unit=t, namespace=f"ns-{t.slug}", local_queue_name="main") for t in teams
    )
    records = []
    for i, team in enumerate(teams):
        ns = f"ns-{team.slug}"
        for j in range(RUNNING_PER_TEAM):
            flavor = flavors[(i + j) % len(flavors)]
            records.append(WorkloadRecord(
                cluster=west, unit=team, scheduler_id=f"r-{i}-{j}", job_id=f"{ns}/job-run-{j}", account=ns,
                owner=f"u{i}", tier="P1", flavor=flavor, flavor_name=flavor.name, devices=4 + 2 * (j % 2),
                borrowed=2 * (j % 2), state="running", submitted_at=NOW - timedelta(hours=2),
                admitted_at=NOW - timedelta(hours=1),
            ))  # fmt: skip
        for j in range(PENDING_PER_TEAM):
            flavor = FLAVORS[(i + j) % len(FLAVORS)]
            ask = {
                "pods": 2, "per_pod": 4, "devices": 8, "job": f"Job/wait-{j}", "reason": "Pending",
                "message": f"couldn't assign flavors to pod set main: insufficient unused quota for "
                f"nvidia.com/gpu in flavor {flavor}, 4 more needed",
                "placement": {"nodeSelector": {"gpu": flavor}} if j % 2 else {},
            }  # fmt: skip
            records.append(WorkloadRecord(
                cluster=west, unit=team, scheduler_id=f"p-{i}-{j}", job_id=f"{ns}/job-wait-{j}", account=ns,
                owner=f"u{i}", tier="P1", state="pending", submitted_at=NOW - timedelta(minutes=30 - j),
                track={"uid": f"p-{i}-{j}", "ask": ask}, resources={"queue": "main"},
            ))  # fmt: skip
    WorkloadRecord.objects.bulk_create(records, batch_size=5_000)
    return [t.pk for t in teams]


def simulated_month(seed: int = 44) -> list:
    """FCFS M/M/32 per flavor at 85 % load over 30 days (see the module's docstring)."""
    import heapq

    from accounting.policy.estimate import PastJob

    rng = random.Random(seed)
    servers, load, mean_run_s, days = 32, 0.85, 7200.0, 30
    jobs = []
    for flavor in FLAVORS:
        free = [0.0] * servers
        t = 0.0
        while t < days * 86400:
            t += rng.expovariate(load * servers / mean_run_s)
            start = max(t, heapq.heappop(free))
            heapq.heappush(free, start + rng.expovariate(1 / mean_run_s))
            submitted = NOW - timedelta(days=days) + timedelta(seconds=t)
            jobs.append(
                PastJob(rng.randrange(TEAMS), f"west/{flavor}", submitted, submitted + timedelta(seconds=start - t))
            )
    return jobs


def calibration_figures() -> dict[str, float]:
    from accounting.policy.estimate import calibrate

    jobs = simulated_month()
    started = time.perf_counter()
    found = calibrate(jobs, window_s=14 * 86400)
    took = time.perf_counter() - started
    print(f"calibration on a simulated month of {len(jobs):,} jobs: {found.inside:,} of {found.jobs:,} banded jobs "
          f"started inside their band ({found.without_band} without one) in {took:.2f} s")  # fmt: skip
    return {"calibration_share": found.share_inside or 0.0, "calibrate_s": took, "calibration_jobs": found.jobs}


def main() -> None:
    import django

    setup_database(database_url("waiting"))
    django.setup()
    from django.db import connection

    from accounting.models import WorkloadRecord
    from accounting.services.waiting import explain_record, find_waiting, unit_waiting
    from quotas.models import Cluster

    started = time.perf_counter()
    teams = cluster()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    pending = WorkloadRecord.objects.filter(state="pending").count()
    admitted = WorkloadRecord.objects.filter(state="running").count()
    print(
        f"{TEAMS:,} ClusterQueues, {pending:,} pending and {admitted:,} admitted: {time.perf_counter() - started:.0f} s"
    )
    west = Cluster.objects.get(name="west")
    pick = random.Random(44)
    floor, explain, causes = [], [], {}
    for _ in range(ASKS):
        started = time.perf_counter()
        rows = WorkloadRecord.objects.filter(cluster=west, state="running", devices__gt=0)
        list(rows.values_list(*HOLDING))
        floor.append(time.perf_counter() - started)
        team = pick.randrange(TEAMS)
        started = time.perf_counter()
        record = find_waiting(west, f"ns-t{team:04d}", f"job/wait-{pick.randrange(PENDING_PER_TEAM)}")
        assert record is not None
        answer = explain_record(record)
        explain.append(time.perf_counter() - started)
        top = answer.explanation.top
        causes[top.code if top else "none"] = causes.get(top.code if top else "none", 0) + 1
    started = time.perf_counter()
    panel = unit_waiting([teams[7]])
    unit_s = time.perf_counter() - started
    p95 = statistics.quantiles(explain, n=20)[18]
    figures = {
        "explain_p50_ms": 1000 * statistics.median(explain), "explain_p95_ms": 1000 * p95,
        "floor_ms": 1000 * statistics.median(floor), "unit_ms": 1000 * unit_s,
    }  # fmt: skip
    figures["explain_ratio"] = figures["explain_p95_ms"] / figures["floor_ms"]
    figures.update(calibration_figures())
    print(f"top causes of {ASKS} explanations: {causes}; a team's panel: {len(panel)} waiting")
    print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
