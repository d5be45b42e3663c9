"""Hierarchical fair-share, seen the way each scheduler sees it.

* :func:`normalized_shares` — weight over siblings' weights × the parent's share (DESIGN.md).
* :func:`decayed_usage` — usage forgiven with a half-life (seed 8.5.1: with a one-week half-life,
  two-week-old usage counts 25 %).
* :func:`fair_tree` — Slurm's Fair Tree: LevelFS = NormShares / EffectvUsage among siblings (user
  associations beside child accounts), users ranked depth-first by LevelFS with Slurm's ties,
  factor = rank / users (matches ``sshare -a -l -P``); :func:`slurm_share_nodes` builds its tree
  from accounts and user associations, :func:`accrued_weight` decays usage as Slurm does.
* :func:`classic_factor` — Slurm's classic factor 2^(−U/S) on tree-normalised values.
* :func:`kueue_weighted_share` — Kueue's dominant share of borrowed usage over lendable capacity,
  per-mille, divided by the weight (``status.fairSharing.weightedShare``).
* :func:`dominant_share` and :func:`drf_progressive_filling` — DRF (seed 8.4.1, table 1).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .snapshot import OrgSnapshot

MAX_INT64 = 2**63 - 1


def normalized_shares(snapshot: OrgSnapshot) -> dict[int, float]:
    """Each unit's share of the whole tree: its weight over its siblings' × its parent's share."""
    shares: dict[int, float] = {}
    pending: list[tuple[int | None, float]] = [(None, 1.0)]
    while pending:
        parent, parent_share = pending.pop()
        children = snapshot.children.get(parent, ())
        total = sum(snapshot.units[c].weight for c in children)
        for child in children:
            share = parent_share * snapshot.units[child].weight / total if total > 0 else 0.0
            shares[child] = share
            pending.append((child, share))
    return shares


def decay_factor(age: timedelta, half_life: timedelta) -> float:
    """Weight of usage ``age`` old: 0.5 ** (age / half_life); future usage counts in full."""
    if age <= timedelta(0):
        return 1.0
    return float(0.5 ** (age / half_life))


@dataclass(frozen=True, slots=True)
class UsageRecord:
    unit_id: int
    at: datetime
    amount: float
    """Billing-weighted device-seconds (or any additive usage measure)."""


def decayed_usage(records: Iterable[UsageRecord], *, now: datetime, half_life: timedelta) -> dict[int, float]:
    """Sum each unit's own records, each decayed by its age at ``now``."""
    half_s = half_life.total_seconds()
    if half_s <= 0:
        raise ValueError("half_life must be positive")
    now_ts = now.timestamp()
    rate = math.log(2) / half_s
    exp = math.exp
    totals: dict[int, float] = {}
    get = totals.get
    for record in records:
        age = now_ts - record.at.timestamp()
        weight = exp(-rate * age) if age > 0 else 1.0
        totals[record.unit_id] = get(record.unit_id, 0.0) + record.amount * weight
    return totals


def subtree_usage(snapshot: OrgSnapshot, own: Mapping[int, float]) -> dict[int, float]:
    """Usage of each unit including all of its descendants."""
    totals = {uid: own.get(uid, 0.0) for uid in snapshot.units}
    for uid in _bottom_up(snapshot):
        parent = snapshot.units[uid].parent_id
        if parent is not None and parent in totals:
            totals[parent] += totals[uid]
    return totals


def _bottom_up(snapshot: OrgSnapshot) -> list[int]:
    order: list[int] = []
    pending: list[int | None] = [None]
    while pending:
        node = pending.pop()
        for child in snapshot.children.get(node, ()):
            order.append(child)
            pending.append(child)
    order.reverse()
    return order


@dataclass(frozen=True, slots=True)
class ShareNode:
    """A node of a fair-share tree: an account, or a user (association) under an account."""

    key: Hashable
    parent: Hashable | None
    shares: float
    usage: float = 0.0
    """Own usage; subtree usage is summed by :func:`fair_tree`."""
    user: bool = False
    """A user association: only users are ranked and get a factor (an account with no users gets none)."""


@dataclass(frozen=True, slots=True)
class FairTreeLine:
    norm_shares: float
    usage: float
    effective_usage: float
    level_fs: float
    factor: float | None
    """Set on users only, as sshare prints it."""


def fair_tree(nodes: Sequence[ShareNode]) -> dict[Hashable, FairTreeLine]:
    """Slurm's Fair Tree algorithm over ``nodes`` (``priority/multifactor``, ``fair_tree.c``).

    Among siblings — accounts and users alike: NormShares = shares / Σ siblings' shares; EffectvUsage
    = usage / parent's usage; LevelFS = NormShares / EffectvUsage (∞ when unused). A depth-first walk
    visits siblings by descending LevelFS (users before accounts on equal LevelFS) and ranks the users
    it meets: with N user associations in the tree, the first gets N, each next one less, and its
    factor is rank / N. Users tied on LevelFS share a rank; sibling accounts tied on LevelFS are
    walked as one, their children merged (an account tied with the sibling before it passes the tie
    on to its first child). Accounts without users are walked but rank nobody.
    """
    children: dict[Hashable | None, list[ShareNode]] = {}
    for node in nodes:
        children.setdefault(node.parent, []).append(node)
    usage = {node.key: node.usage for node in nodes}
    for node in reversed(_depth_first(children)):
        if node.parent is not None:
            usage[node.parent] = usage.get(node.parent, 0.0) + usage[node.key]
    lines: dict[Hashable, FairTreeLine] = {}
    count = sum(1 for n in nodes if n.user)
    ranking = _Ranking(count, count)
    _rank(children, children.get(None, []), usage, lines, ranking, False, count)
    return lines


@dataclass
class _Ranking:
    rank: int
    remaining: int


def _depth_first(children: Mapping[Hashable | None, list[ShareNode]]) -> list[ShareNode]:
    order: list[ShareNode] = []
    pending = list(children.get(None, []))
    while pending:
        node = pending.pop()
        order.append(node)
        pending.extend(children.get(node.key, []))
    return order


def _rank(
    children: Mapping[Hashable | None, list[ShareNode]],
    siblings: list[ShareNode],
    usage: Mapping[Hashable, float],
    lines: dict[Hashable, FairTreeLine],
    ranking: _Ranking,
    account_tied: bool,
    count: int,
) -> None:
    for node in siblings:
        if node.key not in lines:  # merged siblings were scored among their own siblings
            _score(children, node, usage, lines)
    ordered = sorted(siblings, key=lambda n: (-lines[n.key].level_fs, not n.user))
    previous: float | None = None
    i = 0
    while i < len(ordered):
        node = ordered[i]
        level = lines[node.key].level_fs
        if account_tied:
            tied, account_tied = True, False
        else:
            tied = previous is not None and previous == level
        if node.user:
            if not tied:
                ranking.rank = ranking.remaining
            lines[node.key] = _with_factor(lines[node.key], ranking.rank / count)
            ranking.remaining -= 1
            i += 1
        else:
            merged = [node]
            while i + len(merged) < len(ordered):
                other = ordered[i + len(merged)]
                if other.user or lines[other.key].level_fs != level:
                    break
                merged.append(other)
            below = [c for account in merged for c in children.get(account.key, [])]
            for account in merged:  # each child is scored among its own siblings before any merging
                for child in children.get(account.key, []):
                    _score(children, child, usage, lines)
            _rank(children, below, usage, lines, ranking, tied, count)
            i += len(merged)
        previous = level


def _score(
    children: Mapping[Hashable | None, list[ShareNode]],
    node: ShareNode,
    usage: Mapping[Hashable, float],
    lines: dict[Hashable, FairTreeLine],
) -> None:
    siblings = children.get(node.parent, [])
    total_shares = sum(n.shares for n in siblings)
    parent_usage = usage[node.parent] if node.parent is not None else sum(usage[n.key] for n in siblings)
    norm = node.shares / total_shares if total_shares else 0.0
    eff = usage[node.key] / parent_usage if parent_usage > 0 else 0.0
    level = norm / eff if eff > 0 else math.inf
    lines[node.key] = FairTreeLine(norm, usage[node.key], eff, level, None)


def _with_factor(line: FairTreeLine, factor: float) -> FairTreeLine:
    return FairTreeLine(line.norm_shares, line.usage, line.effective_usage, line.level_fs, factor)


ROOT_USER = ("user", "root", "root")


def slurm_share_nodes(
    accounts: Iterable[tuple[str, str, float]],
    users: Iterable[tuple[str, str, float]],
    usage: Mapping[tuple[str, str], float],
) -> list[ShareNode]:
    """Slurm's association tree as fair-share nodes: ``accounts`` as (name, parent, shares) — parent
    ``root`` at the top —, ``users`` as (user, account, shares); ``usage`` by (account, user). Keys
    are ``("account", name)`` and ``("user", account, user)``. User associations sit beside the
    account's child accounts, as Slurm has them; the ``root`` user association Slurm creates with every
    cluster (shares 1, under root) is added when ``users`` does not hold it."""
    nodes = [
        ShareNode(("account", name), None if parent == "root" else ("account", parent), shares)
        for name, parent, shares in accounts
        if name != "root"
    ]
    listed = False
    for user, account, shares in users:
        listed = listed or (user, account) == ("root", "root")
        parent = None if account == "root" else ("account", account)
        nodes.append(ShareNode(("user", account, user), parent, shares, usage.get((account, user), 0.0), user=True))
    if not listed:
        nodes.append(ShareNode(ROOT_USER, None, 1.0, usage.get(("root", "root"), 0.0), user=True))
    return nodes


def accrued_weight(start_s: float, end_s: float, now_s: float, half_life_s: float) -> float:
    """The decay weight of usage accrued evenly from ``start_s`` to ``end_s`` (epoch seconds), as
    Slurm's decay leaves it at ``now_s``: the mean of 0.5 ** (age / half_life) over the span."""
    if half_life_s <= 0:
        raise ValueError("half_life must be positive")
    rate = math.log(2) / half_life_s
    late = max(0.0, now_s - end_s)
    early = max(0.0, now_s - start_s)
    span = early - late
    if span <= 1e-9:
        return math.exp(-rate * late)
    return (math.exp(-rate * late) - math.exp(-rate * early)) / (rate * span)


def classic_factor(snapshot: OrgSnapshot, own_usage: Mapping[int, float]) -> dict[int, float]:
    """Slurm's classic fair-share factor 2^(−U/S), U = subtree usage / all usage, S = tree share."""
    shares = normalized_shares(snapshot)
    totals = subtree_usage(snapshot, own_usage)
    grand = sum(totals[root] for root in snapshot.roots())
    result = {}
    for uid, share in shares.items():
        used = totals[uid] / grand if grand > 0 else 0.0
        result[uid] = 2.0 ** (-used / share) if share > 0 else 0.0
    return result


def kueue_weighted_share(
    *, usage: Mapping[str, int], quota: Mapping[str, int], lendable: Mapping[str, int], weight: float
) -> int:
    """Kueue's ``weightedShare`` of one node, in per-mille.

    ``usage`` and ``quota`` are keyed by ``"<flavor>|<resource>"``; ``lendable`` by resource name.
    borrowed(resource) = Σ over flavors of max(0, usage − quota); ratio = borrowed × 1000 / lendable;
    the share is the largest ratio over resources divided by the weight, rounded up. 0 when not
    borrowing; MaxInt64 when the weight is 0 and the node borrows.
    """
    borrowed: dict[str, int] = {}
    for key, used in usage.items():
        resource = _resource_of(key)
        borrowed[resource] = borrowed.get(resource, 0) + max(0, used - quota.get(key, 0))
    ratio = 0.0
    for resource, amount in borrowed.items():
        pool = lendable.get(resource, 0)
        if amount > 0 and pool > 0:
            ratio = max(ratio, amount * 1000 / pool)
    if ratio == 0:
        return 0
    if weight == 0:
        return MAX_INT64
    return math.ceil(ratio / weight)


def _resource_of(key: str) -> str:
    flavor, _, resource = key.partition("|")
    return resource or flavor


def dominant_share(allocation: Mapping[str, float], capacity: Mapping[str, float]) -> tuple[float, str]:
    """DRF: the largest share of any resource, and which resource it is (ties: first by name)."""
    best = (0.0, "")
    for resource in sorted(allocation):
        if capacity.get(resource, 0) > 0:
            share = allocation[resource] / capacity[resource]
            if share > best[0]:
                best = (share, resource)
    return best


def drf_progressive_filling(
    demands: Mapping[str, Mapping[str, float]], capacity: Mapping[str, float]
) -> dict[str, int]:
    """Grant one task at a time to the tenant with the lowest dominant share whose next task fits.

    ``demands`` is each tenant's per-task demand vector. Returns tasks granted per tenant.
    """
    tasks = dict.fromkeys(demands, 0)
    used = dict.fromkeys(capacity, 0.0)
    active = set(demands)
    while active:

        def share(tenant: str) -> float:
            alloc = {r: tasks[tenant] * d for r, d in demands[tenant].items()}
            return dominant_share(alloc, capacity)[0]

        tenant = min(sorted(active), key=share)
        need = demands[tenant]
        if all(used[r] + need.get(r, 0) <= capacity[r] + 1e-9 for r in capacity):
            tasks[tenant] += 1
            for r in capacity:
                used[r] += need.get(r, 0)
        else:
            active.discard(tenant)
    return tasks
