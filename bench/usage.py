"""Benchmark the usage layer on PostgreSQL.

    python bench/usage.py            # 1,000,000 sacct lines (BENCH_USAGE_LINES to change)

Makes a month of `sacct -P` text for 1,000 accounts × 4 GPU types (1,000,000 job lines, 3 % of them a
second, requeued run), then in a database of its own (allot_bench on the PostgreSQL of DATABASE_URL,
or 127.0.0.1): the csv module alone reading the text (the floor), Allot's ingest of the same text
(parse, fold, upsert records and allocations, streamed in batches), and the month's rollup of those
allocations. Prints the figures; the LAST line is key=value: parse_floor_s, ingest_1m_s,
ingest_ratio, ingest_peak_mb (the process's peak resident memory, which streaming keeps flat),
rollup_month_s, records, allocations.
"""

from __future__ import annotations

import csv
import os
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.benchdb import database_url, setup_database  # noqa: E402

LINES = int(os.environ.get("BENCH_USAGE_LINES", "1000000"))
UNITS, TYPES = 1000, ("a100", "h100", "l40s", "v100")
MONTH = datetime(2026, 10, 1, tzinfo=UTC)


def make_sacct(path: Path) -> int:
    """The month as sacct prints it (FIELDS order, no header); returns the number of lines."""
    rng = random.Random(42)
    written = 0
    fmt = "%Y-%m-%dT%H:%M:%S"
    with path.open("w") as f:
        job = 1000
        while written < LINES:
            job += 1
            account = f"acct{rng.randrange(UNITS):04d}"
            gpus, kind = rng.choice((1, 1, 2, 4, 8)), rng.choice(TYPES)
            submit = MONTH + timedelta(seconds=rng.randrange(30 * 86400))
            start = submit + timedelta(seconds=rng.randrange(600))
            end = start + timedelta(seconds=rng.randrange(60, 8 * 3600))
            tres = f"billing={gpus},cpu={gpus * 4},gres/gpu:{kind}={gpus},gres/gpu={gpus},mem=64G,node=1"
            user = f"user{rng.randrange(5000)}"
            common = f"lab|{account}|{user}|guar-{account}|gpu"
            if rng.random() < 0.03 and written + 2 <= LINES:  # preempted, then requeued and finished
                mid = start + (end - start) / 2
                f.write(f"{job}|{written}|{common}|PREEMPTED|{submit:{fmt}}|{start:{fmt}}|{mid:{fmt}}|{tres}|0:0\n")
                f.write(f"{job}|{written + 1}|{common}|COMPLETED|{mid:{fmt}}|{mid:{fmt}}|{end:{fmt}}|{tres}|0:0\n")
                written += 2
            else:
                state = rng.choice(("COMPLETED", "COMPLETED", "COMPLETED", "FAILED", "CANCELLED by 1000", "TIMEOUT"))
                f.write(f"{job}|{written}|{common}|{state}|{submit:{fmt}}|{start:{fmt}}|{end:{fmt}}|{tres}|0:0\n")
                written += 1
    return written


def organisation() -> object:
    """1,000 teams under one department, each with a Slurm account and a guarantee on each GPU type
    (bulk rows: this is the bench's fixture, not what it measures)."""
    from quotas.models import Cluster, ClusterKind, OrgUnit, Quota, ResourceFlavor

    cluster = Cluster.objects.create(name="lab", kind=ClusterKind.SLURM, connection_ref="slurm:lab")
    flavors = [
        ResourceFlavor.objects.create(
            cluster=cluster, name=t, accelerator_model=t, device_memory_gb=80, physical_devices=8 * UNITS
        )
        for t in TYPES
    ]
    org = OrgUnit.objects.create(kind="organisation", slug="acme", name="Acme", path="acme", depth=0)
    dept = OrgUnit.objects.create(kind="department", slug="d", name="D", parent=org, path="acme/d", depth=1)
    teams = OrgUnit.objects.bulk_create(
        OrgUnit(kind="team", slug=f"acct{i:04d}", name=f"team {i}", parent=dept, path=f"acme/d/acct{i:04d}", depth=2)
        for i in range(UNITS)
    )
    Quota.objects.bulk_create(
        Quota(unit=u, flavor=f, resource="nvidia.com/gpu", guarantee=8) for u in [org, dept, *teams] for f in flavors
    )
    return cluster


def main() -> None:
    url = database_url("usage")
    work = Path(tempfile.mkdtemp(prefix="allot-bench-usage-"))
    text = work / "sacct.psv"
    lines = make_sacct(text)
    print(
        f"{lines:,} sacct lines, {text.stat().st_size / 2**20:.0f} MiB, for {UNITS} accounts × {len(TYPES)} GPU types"
    )
    setup_database(url)

    import django

    django.setup()
    from accounting.models import Allocation, WorkloadRecord
    from accounting.services import usage_ingest_slurm, usage_rollup

    cluster = organisation()

    started = time.perf_counter()
    with text.open() as f:
        rows = sum(1 for _ in csv.reader(f, delimiter="|"))
    parse_floor_s = time.perf_counter() - started
    print(f"csv module alone: {rows:,} rows in {parse_floor_s:.2f} s")

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    with text.open() as f:
        run = usage_ingest_slurm(cluster=cluster, lines=f, now=MONTH + timedelta(days=31))  # type: ignore[arg-type]
    ingest_s = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    records, allocations = WorkloadRecord.objects.count(), Allocation.objects.count()
    print(
        f"ingest: {ingest_s:.1f} s ({lines / ingest_s:,.0f} lines/s), {records:,} records, "
        f"{allocations:,} allocations, "
        f"status {run.status}; peak memory {peak_mb:.0f} MB (before the ingest: {rss_before:.0f} MB)"
    )

    started = time.perf_counter()
    hours = usage_rollup(start=MONTH, end=MONTH + timedelta(days=31), now=MONTH + timedelta(days=31))
    rollup_s = time.perf_counter() - started
    print(f"rollup of the month: {hours:,} unit-flavor-hours in {rollup_s:.1f} s")
    print(
        f"parse_floor_s={parse_floor_s:.2f} ingest_1m_s={ingest_s * 1_000_000 / lines:.1f} "
        f"ingest_ratio={ingest_s / parse_floor_s:.1f} ingest_peak_mb={peak_mb:.0f} rollup_month_s={rollup_s:.1f} "
        f"records={records} allocations={allocations}"
    )


if __name__ == "__main__":
    main()
