"""Benchmark the governance plan and its backtest (pure core, no database).

    python bench/plan.py

1. A month of hourly demand for 1,000 teams × 4 GPU types (10 departments of 100 teams; seeded
   random walks with bursts, some teams idle, some queueing): evidence, the plan, and the backtest
   under the month's quotas and under the plan (``plan_month_s``; target ≤ 10 s).
2. One what-if for a department of 50 teams: the proposed numbers checked as one change and the
   month replayed with them (``whatif_ms``; target ≤ 1,000 ms).
3. The real Helios Earth month (accounting/demo_data, 16 teams × 43,200 minutes): how well the
   backtest of the month's own quotas reproduces what really happened (``reproduce_err_pct``, fleet
   allocated GPU-hours), and what the plan would have done to its queue (``helios_queued_h_before``,
   ``helios_queued_h_after``).

The LAST line is key=value.
"""

from __future__ import annotations

import gzip
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accounting.policy.backtest import FlavorDemand, Terms, reproduction_error, simulate, totals  # noqa: E402
from accounting.policy.plan_check import check_plan  # noqa: E402
from accounting.policy.plan_model import Settings, evidence  # noqa: E402
from accounting.policy.planner import make_plan  # noqa: E402
from quotas.policy.builder import TreeBuilder  # noqa: E402
from quotas.policy.quantity import Resource  # noqa: E402
from quotas.policy.snapshot import Quota, UnitKind  # noqa: E402

GPU = Resource.GPU
TYPES = ("a100-80gb", "a100-40gb", "h100", "l40s")
DEPARTMENTS, TEAMS, HOURS = 10, 100, 744


def fleet(rng: np.random.Generator) -> tuple[object, list[FlavorDemand], dict[str, list[int]]]:
    b = TreeBuilder()
    guarantees = rng.choice([0, 8, 16, 24, 32, 64], size=(DEPARTMENTS * TEAMS, len(TYPES)))
    org = b.unit("acme", UnitKind.ORGANISATION)
    flavors = [b.flavor(f"bench/{t}", int(guarantees[:, i].sum()) + 64) for i, t in enumerate(TYPES)]
    for f, i in zip(flavors, range(len(TYPES)), strict=True):
        b.quota(org, f, GPU, int(guarantees[:, i].sum()))
    teams: dict[str, list[int]] = {}
    for d in range(DEPARTMENTS):
        dept = b.unit(f"dept{d}", UnitKind.DEPARTMENT, org)
        rows = guarantees[d * TEAMS : (d + 1) * TEAMS]
        for f, i in zip(flavors, range(len(TYPES)), strict=True):
            b.quota(dept, f, GPU, int(rows[:, i].sum()))
        ids = []
        for t in range(TEAMS):
            team = b.unit(f"team{t}", UnitKind.TEAM, dept)
            ids.append(team)
            for f, i in zip(flavors, range(len(TYPES)), strict=True):
                b.quota(team, f, GPU, int(rows[t, i]))
        teams[f"dept{d}"] = ids
    snapshot = b.build()
    demands = []
    everyone = [u for ids in teams.values() for u in ids]
    for i, f in enumerate(flavors):
        g = guarantees[:, i].astype(float).reshape(-1, 1)
        appetite = rng.uniform(0.0, 1.6, size=(len(everyone), 1))  # idle teams to queueing ones
        walk = np.clip(appetite + np.cumsum(rng.normal(0, 0.05, size=(len(everyone), HOURS)), axis=1), 0, 3)
        want = np.round(g * walk)
        held = np.minimum(want, g)
        queued = np.maximum(0.0, want - held)
        observed = {u: Terms(int(g[n, 0])) for n, u in enumerate(everyone)}
        present = np.ones(held.shape, dtype=bool)
        demands.append(FlavorDemand(f, tuple(everyone), 60, held, queued, present, observed, 64))
    return snapshot, demands, teams


def helios() -> tuple[float, float, float]:
    """The demo's real month through the backtest and the planner (no database)."""
    path = ROOT / "accounting" / "demo_data" / "helios-earth-2020-05.csv.gz"
    with gzip.open(path, "rt") as f:
        next(f)
        rows = [line.rstrip("\n").split(",") for line in f]
    vcs = sorted({r[1] for r in rows})
    minutes = sorted({r[0] for r in rows})
    col = {m: n for n, m in enumerate(minutes)}
    b = TreeBuilder()
    flavor = b.flavor("helios-earth/v100", 856)
    org = b.unit("acme", UnitKind.ORGANISATION)
    earth = b.unit("earth", UnitKind.DEPARTMENT, org)
    b.quota(org, flavor, GPU, 856)
    b.quota(earth, flavor, GPU, 856)
    ids = {vc: b.unit(vc.lower(), UnitKind.TEAM, earth) for vc in vcs}
    quota = {r[1]: int(r[3]) for r in rows}
    for vc, uid in ids.items():
        b.quota(uid, flavor, GPU, quota[vc])
    snapshot = b.build()
    held = np.zeros((len(vcs), len(minutes)))
    queued = np.zeros_like(held)
    row = {vc: n for n, vc in enumerate(vcs)}
    for r in rows:
        held[row[r[1]], col[r[0]]], queued[row[r[1]], col[r[0]]] = float(r[4]), float(r[5])
    present = np.ones(held.shape, dtype=bool)
    d = FlavorDemand(flavor, tuple(ids[vc] for vc in vcs), 1, held, queued, present,
                     {ids[vc]: Terms(quota[vc]) for vc in vcs}, 0, {}, True)  # fmt: skip
    today = simulate(d, {})
    plan = make_plan(snapshot, evidence(d), lends_idle={flavor: True}, settings=Settings())
    after = simulate(d, {u: t for (u, _), t in plan.terms().items()})
    return 100 * reproduction_error(d, today), totals(today).queued_h, totals(after).queued_h


def main() -> None:
    rng = np.random.default_rng(7)
    snapshot, demands, teams = fleet(rng)
    started = time.perf_counter()
    found = [e for d in demands for e in evidence(d)]
    plan = make_plan(snapshot, found, lends_idle={d.flavor: False for d in demands}, settings=Settings())  # type: ignore[arg-type]
    terms = plan.terms()
    before = after = 0.0
    for d in demands:
        before += totals(simulate(d, {})).queued_h
        after += totals(simulate(d, {u: t for (u, f), t in terms.items() if f == d.flavor})).queued_h
    plan_s = time.perf_counter() - started
    print(f"plan + backtest, {DEPARTMENTS * TEAMS} teams × {len(TYPES)} flavors × {HOURS} h: {plan_s:.2f} s, "
          f"{len(plan.items)} items; queued {before:,.0f} → {after:,.0f} device-hours")  # fmt: skip

    department = teams["dept0"][:50]
    d = demands[0]
    chosen = set(department)
    sub = FlavorDemand(
        d.flavor, tuple(department), d.step_minutes,
        d.held[[d.units.index(u) for u in department]], d.queued[[d.units.index(u) for u in department]],
        d.present[[d.units.index(u) for u in department]], {u: d.observed[u] for u in chosen}, d.pool,
    )  # fmt: skip
    started = time.perf_counter()
    edits = {(u, d.flavor, GPU): Quota(d.observed[u].guarantee, 4, 0) for u in department}
    problems = check_plan(snapshot, edits)  # type: ignore[arg-type]
    simulate(sub, {})
    simulate(sub, {u: Terms(q.guarantee, q.burst, q.lendable) for (u, _, _), q in edits.items()})
    whatif_ms = (time.perf_counter() - started) * 1000
    print(f"what-if for a department of 50 teams: {whatif_ms:.0f} ms ({len(problems)} violations)")

    err, queued_before, queued_after = helios()
    print(f"Helios Earth, May 2020: reproduction error {err:.4f} %; queued {queued_before:,.0f} → {queued_after:,.0f}")
    print(
        f"plan_month_s={plan_s:.2f} whatif_ms={whatif_ms:.0f} reproduce_err_pct={err:.4f} "
        f"helios_queued_h_before={queued_before:.0f} helios_queued_h_after={queued_after:.0f} items={len(plan.items)}"
    )


if __name__ == "__main__":
    main()
