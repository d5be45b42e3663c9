"""Benchmark GPU-hour budgets: their evaluation after an hourly rollup, and what they add to the
Kueue and Slurm compiles.

    python bench/budgets.py

1. On PostgreSQL (a database of its own, allot_bench): 10,000 teams under 10 departments, a budget on
   each team × 4 GPU types (40,000 budgets), and the month's first 72 hours of rollups (2,880,000
   unit-flavor-hours, written by one INSERT … SELECT). ``budget_eval_s`` is one evaluation as the task
   runs it after a rollup (every budget's period spend, carry-over, trailing rate, recorded with its
   transitions), an hour after the period's first (``first_eval_s``: its rows created); ``floor_s``
   is the one grouped SUM over the same rows that any evaluation must do, measured in the same run,
   and ``eval_ratio`` the two's ratio. ``findings_s``: the budget findings after it (opened in bulk,
   one digest mail per lead).
2. Pure compiles (bench/kueue.py's 10,000-ClusterQueue tree, bench/slurm.py's 10,000-account tree):
   with a spent budget on every project or team (hold, no-borrowing and deny mixed) against the same
   compile without budgets: ``kueue_compile_s`` / ``kueue_budgets_s`` and ``slurm_compile_s`` /
   ``slurm_budgets_s``.

Prints the figures; the LAST line is key=value pairs.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.benchdb import database_url, setup_database  # noqa: E402

UNITS, DEPTS, TYPES = 10_000, 10, ("a100", "h100", "l40s", "v100")
START = datetime(2026, 10, 1, tzinfo=UTC)
NOW = START + timedelta(hours=72)

FILL = """
INSERT INTO accounting_usagehour (unit_id, flavor_id, hour, minutes, guarantee, allocated, within, borrowed, lent,
                                  pending, active, productive, productive_estimated, minutes_full, minutes_queued)
SELECT u.id, f.id, h, 60, 4, a, LEAST(a, 4), GREATEST(a - 4, 0), 0, 0, NULL, a, TRUE, 0, 0
FROM quotas_orgunit u
CROSS JOIN quotas_resourceflavor f
CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 hour', interval '1 hour') AS h
CROSS JOIN LATERAL (SELECT (u.id %% 7) * 1.0 AS a WHERE h IS NOT NULL OFFSET 0) v
WHERE u.depth = 2
"""


def organisation() -> None:
    """Bulk rows (the bench's fixture, not what it measures): 10 departments of 1,000 teams, a budget
    on every team and GPU type sized so some warn, some run out and most do not."""
    from quotas.models import Budget, Cluster, ClusterKind, OrgUnit, ResourceFlavor

    cluster = Cluster.objects.create(name="lab", kind=ClusterKind.SLURM, connection_ref="slurm:lab")
    flavors = [
        ResourceFlavor.objects.create(
            cluster=cluster, name=t, accelerator_model=t, device_memory_gb=80, physical_devices=10 * UNITS
        )
        for t in TYPES
    ]
    org = OrgUnit.objects.create(kind="organisation", slug="acme", name="Acme", path="acme", depth=0)
    depts = OrgUnit.objects.bulk_create(
        OrgUnit(kind="department", slug=f"d{d}", name=f"D{d}", parent=org, path=f"acme/d{d}", depth=1)
        for d in range(DEPTS)
    )
    teams = OrgUnit.objects.bulk_create(
        OrgUnit(
            kind="team", slug=f"t{i:05d}", name=f"team {i}", parent=depts[i % DEPTS],
            path=f"acme/d{i % DEPTS}/t{i:05d}", depth=2,
        )
        for i in range(UNITS)
    )  # fmt: skip
    actions = ("report", "hold", "no-borrowing", "deny")
    Budget.objects.bulk_create(
        Budget(
            unit=u, flavor=f, device_hours=150 + 50 * (i % 8), action=actions[i % 4], tiers=["P1", "P2"],
            warn_percent=80,
        )
        for i, u in enumerate(teams)
        for f in flavors
    )  # fmt: skip


def database() -> dict[str, float]:
    import django

    setup_database(database_url("budgets"))
    django.setup()
    from django.db import connection

    from accounting.models import UsageHour
    from accounting.services.budgets import _sums, budget_findings_detect, budgets_evaluate
    from quotas.models import BudgetSpend, ResourceFlavor

    organisation()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"start": START, "end": NOW})
        cursor.execute("ANALYZE accounting_usagehour")
    hours = UsageHour.objects.count()
    filled = time.perf_counter() - started
    print(f"{hours:,} unit-flavor-hours for {UNITS:,} teams × {len(TYPES)} GPU types in {filled:.1f} s")
    flavors = list(ResourceFlavor.objects.values_list("pk", flat=True))
    started = time.perf_counter()
    sums = _sums(START, NOW, flavors)
    floor_s = time.perf_counter() - started
    started = time.perf_counter()
    first = budgets_evaluate(now=NOW - timedelta(hours=1))
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    result = budgets_evaluate(now=NOW)
    eval_s = time.perf_counter() - started
    spent = BudgetSpend.objects.filter(exhausted_at__isnull=False).count()
    print(f"floor: one grouped SUM over the period's rows ({len(sums):,} groups) in {floor_s:.2f} s")
    print(f"first evaluation of the period (rows created) in {first_s:.2f} s: {first}")
    print(f"evaluated {result['budgets']:,} budgets an hour later in {eval_s:.2f} s: {result}; {spent:,} spent")
    started = time.perf_counter()
    found = budget_findings_detect(now=NOW)
    findings_s = time.perf_counter() - started
    print(f"budget findings: {found['found']} in {findings_s:.2f} s")
    return {
        "budget_eval_s": eval_s, "first_eval_s": first_s, "floor_s": floor_s, "eval_ratio": eval_s / floor_s,
        "findings_s": findings_s, "budgets": result["budgets"], "budgets_spent": spent,
    }  # fmt: skip


def spent_budgets(units: list[int], flavors: tuple[str, ...], at: datetime) -> tuple[dict, dict]:
    """A spent budget on every unit and flavor, hold / no-borrowing / deny in turn (all of them do
    something on the cluster)."""
    from quotas.policy import budgets as bud

    kinds = (bud.BudgetAction.HOLD, bud.BudgetAction.NO_BORROWING, bud.BudgetAction.DENY)
    start, _ = bud.period_bounds(bud.Period.MONTH, at)
    budgets, spends = {}, {}
    for i, uid in enumerate(units):
        for key in flavors:
            budgets[(uid, key)] = bud.Budget(uid, key, 100, action=kinds[i % 3], tiers=("P0", "P1", "P2", "P3"))
            spends[(uid, key)] = bud.BudgetSpend(start, 100.0, 120.0)
    return budgets, spends


def compiles() -> dict[str, float]:
    from bench.kueue import build
    from bench.slurm import tree
    from quotas.policy.kueue import compile_kueue
    from quotas.policy.slurm.translate import compile_slurm

    b, target = build()
    target = replace(target, at=NOW)
    plain = b.build()
    projects = [uid for uid, u in plain.units.items() if u.kind.value == "project"]
    budgets, spends = spent_budgets(projects, tuple(plain.flavors), NOW)
    with_budgets = replace(plain, budgets=MappingProxyType(budgets), budget_spend=MappingProxyType(spends))
    figures = {}
    for name, snapshot in (("kueue_compile_s", plain), ("kueue_budgets_s", with_budgets)):
        started = time.perf_counter()
        objects = compile_kueue(snapshot, target)
        figures[name] = time.perf_counter() - started
    held = sum(o["kind"] == "LocalQueue" and o["spec"].get("stopPolicy") == "Hold" for o in objects)
    print(
        f"Kueue: {len(budgets):,} spent budgets ({held:,} LocalQueues held): compile "
        f"{figures['kueue_compile_s']:.2f} s without, {figures['kueue_budgets_s']:.2f} s with"
    )
    b, starget = tree(10_000, "p")
    starget = replace(starget, at=NOW)
    plain = b.build()
    teams = [uid for uid, u in plain.units.items() if u.kind.value == "team"]
    budgets, spends = spent_budgets(teams, tuple(plain.flavors), NOW)
    with_budgets = replace(plain, budgets=MappingProxyType(budgets), budget_spend=MappingProxyType(spends))
    for name, snapshot in (("slurm_compile_s", plain), ("slurm_budgets_s", with_budgets)):
        started = time.perf_counter()
        state = compile_slurm(snapshot, starget)
        figures[name] = time.perf_counter() - started
    minutes = sum(1 for q in state.qos if q.grp_tres_mins)
    print(
        f"Slurm: {len(budgets):,} spent budgets ({minutes:,} QOS with GrpTRESMins): compile "
        f"{figures['slurm_compile_s']:.2f} s without, {figures['slurm_budgets_s']:.2f} s with"
    )
    figures["kueue_budget_ratio"] = figures["kueue_budgets_s"] / figures["kueue_compile_s"]
    figures["slurm_budget_ratio"] = figures["slurm_budgets_s"] / figures["slurm_compile_s"]
    return figures


def main() -> None:
    figures = {**compiles(), **database()}
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
