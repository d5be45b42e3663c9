"""Benchmark the policy core on a synthetic organisation.

    python bench/policy.py

Workload: 10,000 units (1 organisation, 20 departments, 400 teams, 9,579 projects) × 4 flavors ×
3 resources = 120,000 quotas, validated from scratch; incremental edits on that tree (a random mix
of project, team, department and organisation edits, each through the incremental path); and
fair-share (decayed usage, Fair Tree, classic factor, normalised shares) with 1,000,000 usage
records. Prints the figures; the LAST line is key=value pairs.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from quotas.policy import OrgSnapshot, Quota, Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.fairshare import (
    UsageRecord,
    classic_factor,
    decayed_usage,
    fair_tree,
    normalized_shares,
    slurm_share_nodes,
)
from quotas.policy.invariants import check_quota_edits, validate_tree

FLAVORS = ("west/a100-80gb", "west/a100-40gb", "west/v100-32gb", "west/h100-80gb")
RESOURCES = ((Resource.GPU, 1), (Resource.CPU, 12_000), (Resource.MEMORY, 128 * 2**30))
UNITS, DEPTS, TEAMS_PER_DEPT = 10_000, 20, 20
NOW = datetime(2026, 11, 1, tzinfo=UTC)


def build() -> TreeBuilder:
    b = TreeBuilder()
    for key in FLAVORS:
        b.flavor(key, 1_000_000, headroom=1_000)
    org = b.unit("acme", UnitKind.ORGANISATION)
    levels = {org: 999_000}
    teams = []
    for d in range(DEPTS):
        dept = b.unit(f"d{d}", UnitKind.DEPARTMENT, org, weight=1 + d % 3)
        levels[dept] = levels[org] // DEPTS
        for t in range(TEAMS_PER_DEPT):
            team = b.unit(f"t{t}", UnitKind.TEAM, dept, weight=1 + t % 4)
            levels[team] = levels[dept] // TEAMS_PER_DEPT
            teams.append(team)
    per_team = -(-(UNITS - len(b.units)) // len(teams))
    i = 0
    while len(b.units) < UNITS:
        team = teams[i % len(teams)]
        project = b.unit(f"p{i}", UnitKind.PROJECT, team)
        levels[project] = levels[team] // per_team
        i += 1
    for uid, g in levels.items():
        for key in FLAVORS:
            for resource, scale in RESOURCES:
                b.quota(uid, key, resource, g * scale, g * scale // 10, g * scale // 2)
    return b


T = TypeVar("T")


def timed(fn: Callable[[], T], repeat: int = 3) -> tuple[float, T]:
    best, result = float("inf"), fn()
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    b = build()
    snapshot = b.build()
    print(f"tree: {len(snapshot.units)} units, {len(snapshot.quotas)} quotas")

    full_s, problems = timed(lambda: validate_tree(b.build()))  # fresh snapshot: indexes built inside
    assert problems == [], problems[:3]
    print(f"full validation from scratch: {full_s:.3f} s ({len(problems)} violations)")

    validate_tree(snapshot)  # a long-lived process has its indexes built
    rng = random.Random(7)
    ids = sorted(snapshot.units)
    edit_times = []
    refused = 0
    for _ in range(400):
        uid = rng.choice(ids) if rng.random() < 0.9 else rng.choice(ids[:421])  # bias some to upper levels
        key = (uid, rng.choice(FLAVORS), rng.choice(RESOURCES)[0])
        old = snapshot.quotas[key]
        new = Quota(max(0, old.guarantee + rng.randint(-5, 5)), old.burst, min(old.lendable, old.guarantee))
        start = time.perf_counter()
        refused += bool(check_quota_edits(snapshot, {key: new}))
        edit_times.append((time.perf_counter() - start) * 1000)
    edit_ms, edit_max = statistics.median(edit_times), max(edit_times)
    print(f"incremental edit: median {edit_ms:.3f} ms, max {edit_max:.3f} ms over 400 edits ({refused} refused)")

    records = [
        UsageRecord(rng.choice(ids), NOW - timedelta(seconds=rng.randint(0, 60 * 86400)), rng.random() * 3600)
        for _ in range(1_000_000)
    ]

    def fairshare(s: OrgSnapshot = snapshot) -> int:
        usage = decayed_usage(records, now=NOW, half_life=timedelta(days=7))
        leaves = [u for u in s.units if not s.children.get(u)]  # one member per leaf unit
        lines = fair_tree(
            slurm_share_nodes(
                [(f"u{u}", f"u{s.units[u].parent_id}" if s.units[u].parent_id else "root", s.units[u].weight)
                 for u in s.units],
                [(f"m{u}", f"u{u}", 1.0) for u in leaves],
                {(f"u{u}", f"m{u}"): usage.get(u, 0.0) for u in leaves},
            )
        )  # fmt: skip
        classic_factor(s, usage)
        normalized_shares(s)
        return len(lines)

    fairshare_s, lines = timed(fairshare, repeat=2)
    print(f"fair-share over 1,000,000 usage records: {fairshare_s:.3f} s ({lines} accounts and members ranked)")
    print(
        f"validate_full_s={full_s:.3f} validate_edit_ms={edit_ms:.3f} validate_edit_max_ms={edit_max:.3f} "
        f"fairshare_s={fairshare_s:.3f}"
    )


if __name__ == "__main__":
    main()
