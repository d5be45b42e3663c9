"""Fair-share on a Slurm cluster as Slurm computes it (``sshare -a -l``), from the jobs Allot
ingested with sacct: each account's and member's shares, decayed usage, effective usage, LevelFS and
each member's FairShare factor (``quotas.policy.fairshare.fair_tree``).

Usage is what Slurm charges fair-share with: billing TRES × seconds held × the QOS's UsageFactor
(burst QOS 0.5), decayed with the cluster's half-life (its ``PriorityDecayHalfLife``) as it accrued.
The tree is the one Allot compiles for the cluster (accounts with their Fairshare and the members'
user associations beside child accounts, plus Slurm's own ``root`` user), or the associations read
from the cluster when given (a site's own accounts then count too). Read-only: no audit row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, FloatField, Q, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from accounting.models import WorkloadRecord
from quotas import selectors
from quotas.models import Cluster, ClusterKind, OrgUnit
from quotas.policy.fairshare import accrued_weight, fair_tree, slurm_share_nodes

FORGOTTEN_HALF_LIVES = 20
"""Usage older than this many half-lives weighs less than a millionth: not read."""


@dataclass(frozen=True)
class ShareLine:
    account: str
    user: str
    """Empty on an account's own line."""
    unit_path: str
    shares: float
    norm_shares: float
    usage: float
    """Decayed billing-seconds (Slurm's RawUsage)."""
    effective_usage: float
    level_fs: float | None
    """None where it is infinite (no usage)."""
    factor: float | None
    """A member's FairShare; on an account, the highest of its members' (None without members)."""
    depth: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "user": self.user,
            "unit_path": self.unit_path,
            "shares": self.shares,
            "norm_shares": round(self.norm_shares, 6),
            "usage": round(self.usage, 3),
            "effective_usage": round(self.effective_usage, 6),
            "level_fs": None if self.level_fs is None else round(self.level_fs, 6),
            "factor": None if self.factor is None else round(self.factor, 6),
            "depth": self.depth,
        }


@dataclass(frozen=True)
class FairShareReport:
    cluster: str
    at: datetime
    half_life_s: int
    since: datetime | None
    lines: list[ShareLine] = field(default_factory=list)
    jobs: int = 0


def usage_by_association(
    cluster: Cluster, *, now: datetime, half_life_s: int, usage_factor: Mapping[str, float], since: datetime | None
) -> tuple[dict[tuple[str, str], float], int]:
    """Decayed usage per (account, user) from the cluster's workload records: one grouped query (by
    association, QOS and the minutes the jobs started and ended) for ended jobs, one for running ones."""
    horizon = now - timedelta(seconds=half_life_s * FORGOTTEN_HALF_LIVES)
    rows = WorkloadRecord.objects.filter(cluster=cluster, billing__gt=0, admitted_at__isnull=False)
    if since is not None:
        rows = rows.filter(admitted_at__gte=since)
    usage: dict[tuple[str, str], float] = {}
    now_s = now.timestamp()
    jobs = 0

    def add(account: str, user: str, qos: str, amount: float, start: datetime, end: datetime) -> None:
        key = (account.lower(), user)
        weight = accrued_weight(start.timestamp(), end.timestamp(), now_s, half_life_s)
        usage[key] = usage.get(key, 0.0) + amount * usage_factor.get(qos.lower(), 1.0) * weight

    ended = (
        rows.filter(ended_at__gte=horizon)
        .annotate(start=TruncMinute("admitted_at"), end=TruncMinute("ended_at"))
        .values("account", "owner", "tier", "start", "end")
        .annotate(used=Sum(F("billing") * F("held_seconds"), output_field=FloatField()), n=Count("id"))
    )
    for row in ended:
        add(row["account"], row["owner"], row["tier"], row["used"] or 0.0, row["start"], row["end"])
        jobs += row["n"]
    running = rows.filter(Q(ended_at__isnull=True)).values_list("account", "owner", "tier", "billing", "admitted_at")
    for account, owner, tier, billing, started in running:
        if started is None:
            continue
        held = max(0.0, (now - started).total_seconds())  # running: charged as it runs
        add(account, owner, tier, billing * held, started, now)
        jobs += 1
    return usage, jobs


def slurm_fairshare(
    *,
    cluster: Cluster,
    now: datetime | None = None,
    since: datetime | None = None,
    tree: tuple[Iterable[tuple[str, str, float]], Iterable[tuple[str, str, float]]] | None = None,
) -> FairShareReport:
    """The fair-share report of a Slurm cluster. ``since`` counts only jobs that started after it (the
    last time the site reset usage: ``sacctmgr modify account root set RawUsage=0``); ``tree`` is
    (accounts as (name, parent, shares), users as (user, account, shares)) read from the cluster,
    instead of the tree Allot compiles. Raises ValueError for a cluster that is not Slurm."""
    if cluster.kind != ClusterKind.SLURM:
        raise ValueError(f"{cluster.name} is a {cluster.kind} cluster: fair-share here is Slurm's")
    now = now or timezone.now()
    state = selectors.slurm_desired(cluster)
    if tree is None:
        tree = (
            [(a.name, a.parent, float(a.fairshare)) for a in state.accounts],
            [(u.name, u.account, float(u.fairshare)) for u in state.users],
        )
    accounts, users = list(tree[0]), list(tree[1])
    factors = {q.name.lower(): q.usage_factor for q in state.qos}
    usage, jobs = usage_by_association(
        cluster, now=now, half_life_s=cluster.fairshare_half_life, usage_factor=factors, since=since
    )
    lines = fair_tree(slurm_share_nodes(accounts, users, usage))
    paths = _unit_paths()
    parent_of = {name: parent for name, parent, _ in accounts}
    shares_of = {("account", n): s for n, _, s in accounts} | {("user", a, u): s for u, a, s in users}
    members: dict[str, list[ShareLine]] = {}
    for key, line in lines.items():
        if isinstance(key, tuple) and key[0] == "user":
            _, account, user = key
            members.setdefault(account, []).append(
                _line(
                    account, user, paths.get(account, ""), shares_of.get(key, 1.0), line, _depth(account, parent_of) + 1
                )
            )
    out: list[ShareLine] = []
    for name in _top_down(accounts):
        line = lines[("account", name)]
        own = sorted(members.get(name, []), key=lambda m: m.user)
        best = max((m.factor for m in own if m.factor is not None), default=None)
        out.append(
            _line(name, "", paths.get(name, ""), shares_of[("account", name)], line, _depth(name, parent_of), best)
        )
        out += own
    out += members.get("root", [])
    return FairShareReport(cluster.name, now, cluster.fairshare_half_life, since, out, jobs)


def _line(account: str, user: str, path: str, shares: float, line: Any, depth: int, factor: Any = None) -> ShareLine:
    return ShareLine(
        account,
        user,
        path,
        shares,
        line.norm_shares,
        line.usage,
        line.effective_usage,
        None if line.level_fs == float("inf") else line.level_fs,
        line.factor if user else factor,
        depth,
    )


def _unit_paths() -> dict[str, str]:
    """Account name → unit path (the unit's Slurm account, else its slug)."""
    found: dict[str, str] = {}
    for path, slug, account in OrgUnit.objects.filter(archived_at__isnull=True).values_list(
        "path", "slug", "slurm_account"
    ):
        found.setdefault((account or slug).lower(), path)
    return found


def _depth(name: str, parent_of: Mapping[str, str]) -> int:
    depth = 0
    while parent_of.get(name, "root") != "root" and depth < 64:
        name, depth = parent_of[name], depth + 1
    return depth


def _top_down(accounts: list[tuple[str, str, float]]) -> list[str]:
    children: dict[str, list[str]] = {}
    for name, parent, _ in accounts:
        if name != "root":
            children.setdefault(parent, []).append(name)
    order: list[str] = []
    pending = sorted(children.get("root", []), reverse=True)
    while pending:
        name = pending.pop()
        order.append(name)
        pending += sorted(children.get(name, []), reverse=True)
    return order
