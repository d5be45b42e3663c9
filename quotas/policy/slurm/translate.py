"""Snapshot + Slurm cluster → desired accounts, user associations and QOS.

Mapping (docs/concepts/design.md, "Compiling to Slurm", and its pitfalls P1-P6):

* every unit with quota or members on the cluster (and its ancestors) → an account; ``parent`` is
  the parent unit's account (``root`` at the top), ``Fairshare`` the weight (whole numbers);
* members with a Slurm username → user associations, DefaultAccount their unit's account;
* a unit's guarantee → QOS ``guar-<account>`` with ``GrpTRES=gres/gpu:<type>=G`` per flavor, where G
  is what the unit guarantees beyond its children (its residual: children have their own QOS) — on a MIG
  flavor one type per profile, each the whole slices G GPU-equivalents hold (:mod:`.slices`),
  high priority, and ``Preempt=`` every burst QOS — never a GPU ``GrpTRES`` on the account itself
  (pitfall P1: it would count burst usage against siblings' guarantees);
* each unit QOS also carries ``GrpTRES=gres/gpu=<the sum of its typed limits>`` (:data:`UNTYPED`): GPUs
  Slurm allocates without a type count against no typed limit, but against this one;
* a unit's burst → QOS ``burst-<account>``: ``GrpTRES`` = burst, low priority,
  ``PreemptMode=requeue``, ``GraceTime`` and ``PreemptExemptTime`` from its contract (grace period,
  minimum run window), ``UsageFactor=0.5`` (borrowed time counts half in fair-share);
* subtree ceilings (pitfall P1: QOS limits do not nest, so an account's burst QOS knows nothing of
  its parent's ceiling): with ``strict`` (the default) a parent's burst is split among the burst QOS
  of its subtree when compiling — each child keeps its own burst while they all fit, else they share
  the parent's in proportion to what they ask (largest remainders), and the parent's own QOS keeps
  what is left — so no subtree can ever hold more than its ceiling (a unit whose ceiling is the
  whole flavor cannot exceed it: nothing is split there); with ``strict=False``
  (permissive) every unit keeps its full burst and :func:`subtree_overcommit` says where a subtree
  may exceed its ceiling;
* a GPU-hour budget (quotas.policy.budgets): ``hold`` and ``deny`` → ``Flags=NoDecay`` and
  ``GrpTRESMins=gres/gpu:<type>=<minutes>`` on the guarantee and burst QOS of its subtree, each
  what it counted since Allot zeroed its ``RawUsage`` plus what is left of the budget
  (:func:`quotas.policy.budgets.slurm_minutes`): Slurm stops the subtree at its allowance, and its
  jobs pend with ``QOSGrpGRESMinutes`` (``deny``: job_submit.lua refuses them first, naming the
  budget). A Slurm job has no tier but its QOS, so on Slurm a budget counts and stops all its
  units' GPU jobs. ``no-borrowing``, once spent → its burst QOS hold 0 GPUs of the type;
* a tier with a runtime limit (the interactive tier) → QOS ``tier-<name>`` with ``MaxWall`` and
  ``Flags=DenyOnLimit`` (a job asking for more is refused at submission, not left pending forever) and
  ``MaxTRESPerJob=gres/gpu=0``: a job's GPUs count only against the limits of the QOS it runs under,
  and a tier QOS is no unit's, so GPUs in it would escape every ceiling (GPU jobs run under the
  unit's guarantee or burst QOS; job_submit.lua says so); every
  account with QOS of its own may use it (it is never the default); a preemptible tier's QOS is
  requeued like burst;
* each account may use its own QOS (``DefaultQOS`` = its guarantee QOS);
* QOS descriptions are the same for every QOS of a kind (the name says whose it is), so QOS that
  share their limits are written by one sacctmgr call;
* a name Slurm would store differently (uppercase, spaces, punctuation sacctmgr splits on) is not
  lowercased behind the user's back: the unit (with everything under it) or member is left out and
  reported as a :class:`Problem` before anything is applied;
* QOS come first, preemptees (burst) before preemptors (guarantees); accounts top-down; names
  lowercased (sacctmgr lowercases them anyway).

Deterministic: sorted everywhere, no timestamps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from ..budget_effects import effects, slurm_minutes
from ..budgets import BORROWED_FACTOR, BudgetAction
from ..quantity import Resource
from ..snapshot import OrgSnapshot
from .model import Problem, SlurmAccount, SlurmQos, SlurmState, SlurmUser
from .slices import billing as slurm_billing
from .slices import gres_types, slices

GUARANTEE_PRIORITY, BURST_PRIORITY = 1000, 10
GUARANTEE_DESCRIPTION = "guaranteed gpus"
BURST_DESCRIPTION = "borrowed gpus, requeued on reclaim"


UNTYPED = "gres/gpu"
"""Each unit QOS also limits the untyped ``gres/gpu`` to the sum of its typed limits: a typed request
counts against both (Slurm counts ``gres/gpu:<type>`` and ``gres/gpu``), so nothing typed is limited
more, while GPUs allocated without a type (``--ntasks-per-gpu`` with ``-n``, a request past
job_submit.lua) count against no typed limit and would otherwise escape the unit's ceiling."""


def qos_description(cluster: str, text: str) -> str:
    """``allot@<cluster>: <text>``: QOS live in slurmdbd across all its clusters, so each QOS Allot
    writes names the cluster that owns it; a sync only ever changes or deletes its own cluster's."""
    return f"allot@{cluster}: {text}"


SLURM_NAME = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,62}$")


def slurm_name_problem(name: str) -> str:
    """Why Slurm would not keep ``name`` as it is (it lowercases names; sacctmgr splits on spaces,
    commas, quotes and ``=``), or "" when it is fine."""
    if SLURM_NAME.match(name):
        return ""
    hint = name.strip().lower().replace(" ", "-")
    return (
        f"{name!r} is not a name Slurm keeps as it is (Slurm lowercases names and sacctmgr splits on spaces, "
        f"commas, quotes and '='): use lowercase letters, digits, '-', '_' or '.', e.g. {hint!r}"
    )


@dataclass(frozen=True, slots=True)
class SlurmFlavor:
    key: str
    gpu_type: str
    """The ``gres/gpu:<type>`` of the partition's nodes, e.g. ``a100``."""
    billing_weight: float = 1.0
    profiles: tuple[tuple[str, Fraction], ...] = ()
    """A MIG flavor's profiles and their weights in GPU-equivalents (quotas.policy.sharing): each is a GPU
    type of its own, ``<gpu_type>_<profile>`` (:mod:`.slices`)."""

    @property
    def types(self) -> tuple[tuple[str, Fraction], ...]:
        return gres_types(self.gpu_type, self.profiles)


@dataclass(frozen=True, slots=True)
class SlurmTarget:
    cluster: str
    flavors: tuple[SlurmFlavor, ...]
    accounts: Mapping[int, str] = field(default_factory=dict)
    """Account name per unit where it is not the unit's slug."""
    members: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    strict: bool = True
    """Split each parent's burst among its subtree's burst QOS (see the module's docstring)."""
    qos_prefix: str = ""
    """Put before every QOS name (``b-guar-nlp``): a second cluster of the same slurmdbd needs one,
    since QOS names are shared by every cluster there."""
    at: datetime | None = None
    """When the policy is compiled: the budgets in force then. None: budgets are left out."""

    def guar(self, account: str) -> str:
        return f"{self.qos_prefix}guar-{account}"

    def burst(self, account: str) -> str:
        return f"{self.qos_prefix}burst-{account}"


def compile_slurm(snapshot: OrgSnapshot, target: SlurmTarget) -> SlurmState:
    flavors = sorted(target.flavors, key=lambda f: f.gpu_type)
    keys = {f.key for f in flavors}
    present = _present(snapshot, target, keys)
    name = {uid: target.accounts.get(uid) or snapshot.units[uid].slug for uid in present}
    problems, bad = [], set()
    for uid in sorted(present, key=lambda u: snapshot.units[u].path):
        why = slurm_name_problem(name[uid])
        if why:
            bad.add(uid)
            problems.append(
                Problem(
                    "account",
                    name[uid],
                    f"{snapshot.units[uid].path}: {why}; the unit and "
                    "everything under it are left out of Slurm until it is renamed",
                )
            )
    present = {uid for uid in present if uid not in bad and not bad.intersection(snapshot.ancestors(uid))}
    tier_qos = _tier_qos(snapshot, target)
    own_burst = {f.key: (_split_bursts if target.strict else _full_bursts)(snapshot, present, f.key) for f in flavors}
    minutes, no_borrowing = _budget_limits(snapshot, target, keys)
    burst_qos, guar_qos, guar_mins = {}, {}, {}
    for uid in sorted(present, key=lambda u: snapshot.units[u].path):
        children = [c for c in snapshot.children.get(uid, ()) if c in present]
        guar, burst, gmins, bmins = {}, {}, {}, {}
        for flavor in flavors:
            quota = snapshot.quota(uid, flavor.key, Resource.GPU)
            residual = quota.guarantee - sum(snapshot.quota(c, flavor.key, Resource.GPU).guarantee for c in children)
            for gres, weight in flavor.types:  # a MIG flavor: each profile what the equivalents hold of it
                tres = f"gres/gpu:{gres}"
                if residual > 0:
                    guar[tres] = slices(residual, weight)
                    if (uid, flavor.key, "guar") in minutes:
                        gmins[tres] = int(minutes[(uid, flavor.key, "guar")] / weight)
                if own_burst[flavor.key].get(uid, 0) > 0:
                    allowed = 0 if (uid, flavor.key) in no_borrowing else own_burst[flavor.key][uid]
                    burst[tres] = slices(allowed, weight)
                    if (uid, flavor.key, "burst") in minutes:
                        bmins[tres] = int(minutes[(uid, flavor.key, "burst")] / weight)
        for typed in (guar, burst):  # the untyped backstop: see UNTYPED
            if typed:
                typed[UNTYPED] = sum(typed.values())
        contract = snapshot.effective_contract(uid)
        if burst:
            burst_qos[uid] = SlurmQos(
                target.burst(name[uid]),
                qos_description(target.cluster, BURST_DESCRIPTION),
                BURST_PRIORITY,
                preempt_mode="requeue",
                grace_time_s=contract.grace_period_s if contract else 0,
                preempt_exempt_s=contract.min_run_window_s if contract else 0,
                usage_factor=BORROWED_FACTOR,
                grp_tres=burst,
                grp_tres_mins=bmins,
                flags=("NoDecay",) if bmins else (),
            )
        if guar:
            guar_qos[uid] = guar
            guar_mins[uid] = gmins
    preemptees = tuple(
        sorted([q.name for q in burst_qos.values()] + [q.name for q in tier_qos if q.preempt_mode == "requeue"])
    )
    qos = (
        tier_qos
        + sorted(burst_qos.values(), key=lambda q: q.name)
        + [
            SlurmQos(
                target.guar(name[uid]),
                qos_description(target.cluster, GUARANTEE_DESCRIPTION),
                GUARANTEE_PRIORITY,
                preempt=preemptees,
                grp_tres=tres,
                grp_tres_mins=guar_mins[uid],
                flags=("NoDecay",) if guar_mins[uid] else (),
            )
            for uid, tres in sorted(guar_qos.items(), key=lambda kv: name[kv[0]])
        ]
    )
    accounts = []
    for uid in _top_down(snapshot, present):
        unit = snapshot.units[uid]
        own = tuple(
            sorted(
                n
                for n in (
                    target.guar(name[uid]) if uid in guar_qos else "",
                    target.burst(name[uid]) if uid in burst_qos else "",
                )
                if n
            )
        )
        if own:
            own = tuple(sorted(own + tuple(q.name for q in tier_qos)))
        root = snapshot.units[(snapshot.ancestors(uid) or [uid])[-1]]
        accounts.append(
            SlurmAccount(
                name[uid],
                name[unit.parent_id] if unit.parent_id in present else "root",
                max(1, round(unit.weight)),
                f"{unit.kind} {unit.path}".lower(),
                root.slug.lower(),
                own,
                target.guar(name[uid]) if uid in guar_qos else (target.burst(name[uid]) if uid in burst_qos else ""),
            )
        )
    members = {(u, uid) for uid, users in target.members.items() if uid in present for u in users}
    kept = set()
    for user, uid in sorted(members):
        why = slurm_name_problem(user)
        if why:
            problems.append(Problem("user", f"{user}@{name[uid]}", f"member of {snapshot.units[uid].path}: {why}"))
        else:
            kept.add(SlurmUser(user, name[uid], name[uid]))
    users = sorted(kept, key=lambda u: (u.name, u.account))
    billing = {f.key: slurm_billing(f.gpu_type, f.profiles, f.billing_weight) for f in flavors}
    return SlurmState(target.cluster, tuple(accounts), tuple(_one_default(users)), tuple(qos), billing, tuple(problems))


def _budget_limits(
    snapshot: OrgSnapshot, target: SlurmTarget, keys: set[str]
) -> tuple[dict[tuple[int, str, str], int], set[tuple[int, str]]]:
    """Budget minutes per (unit, flavor, guar|burst) QOS, and the (unit, flavor) whose spent
    no-borrowing budget empties its burst QOS (a spent one's subtree keeps its own burst)."""
    if target.at is None or not snapshot.budgets:
        return {}, set()
    budgets = {k: b for k, b in snapshot.budgets.items() if b.flavor in keys}
    spent = effects(budgets, snapshot.budget_spend, snapshot.children, snapshot.tiers, target.at)
    no_borrowing = {(e.unit_id, e.flavor) for e in spent if e.action is BudgetAction.NO_BORROWING}
    return slurm_minutes(budgets, snapshot.budget_spend, snapshot.children, target.at), no_borrowing


def _full_bursts(snapshot: OrgSnapshot, present: set[int], flavor: str) -> dict[int, int]:
    """Permissive: every unit's burst QOS holds its whole burst."""
    return {uid: snapshot.quota(uid, flavor, Resource.GPU).burst for uid in present}


def _split_bursts(snapshot: OrgSnapshot, present: set[int], flavor: str) -> dict[int, int]:
    """Strict: each unit's own burst QOS limit such that, for every unit whose ceiling is below the
    flavor's physical devices, the burst QOS of its whole subtree add up to no more than its burst
    (its guarantee QOS add up to its guarantee, so the subtree holds no more than its ceiling). A unit
    whose ceiling is the whole flavor cannot exceed it: its children keep their own bursts."""
    physical = snapshot.flavors[flavor].physical_devices if flavor in snapshot.flavors else None

    def bound(uid: int) -> int | None:
        quota = snapshot.quota(uid, flavor, Resource.GPU)
        return None if physical is not None and quota.ceiling >= physical else quota.burst

    own: dict[int, int] = {}
    pending = [(uid, bound(uid)) for uid in sorted(present) if _top(snapshot, uid, present)]
    while pending:
        uid, allowance = pending.pop()
        children = sorted(c for c in snapshot.children.get(uid, ()) if c in present)
        if allowance is None:
            own[uid] = snapshot.quota(uid, flavor, Resource.GPU).burst
            pending += [(c, bound(c)) for c in children]
            continue
        asks = {c: min(snapshot.quota(c, flavor, Resource.GPU).burst, allowance) for c in children}
        given = asks if sum(asks.values()) <= allowance else _largest_remainders(allowance, asks)
        own[uid] = allowance - sum(given.values())
        pending += sorted(given.items())
    return own


def _top(snapshot: OrgSnapshot, uid: int, present: set[int]) -> bool:
    parent = snapshot.units[uid].parent_id
    return parent is None or parent not in present


def _largest_remainders(total: int, asks: Mapping[int, int]) -> dict[int, int]:
    """``total`` split in proportion to ``asks`` (whole GPUs, largest remainders; ties by key)."""
    weight = sum(asks.values())
    exact = {k: total * a / weight for k, a in asks.items()}
    given = {k: int(v) for k, v in exact.items()}
    left = total - sum(given.values())
    for key in sorted(asks, key=lambda k: (-(exact[k] - given[k]), k))[:left]:
        given[key] += 1
    return given


def _tier_qos(snapshot: OrgSnapshot, target: SlurmTarget) -> list[SlurmQos]:
    """``tier-<name>`` for each tier with a runtime limit: ``MaxWall`` in minutes (rounded up)."""
    found = []
    for tier in sorted(snapshot.tiers.values(), key=lambda t: t.name):
        if not tier.max_runtime_s:
            continue
        label = " ".join(re.sub(r"[^a-z0-9 -]+", " ", (tier.display_name or tier.name).lower()).split())
        found.append(
            SlurmQos(
                f"{target.qos_prefix}tier-{tier.name.lower()}",
                qos_description(target.cluster, f"tier {tier.name.lower()} {label}")[:60],
                BURST_PRIORITY if tier.preemptible else GUARANTEE_PRIORITY,
                preempt_mode="requeue" if tier.preemptible else "cluster",
                max_wall_min=-(-tier.max_runtime_s // 60),
                flags=("DenyOnLimit",),
                max_tres={"gres/gpu": 0},
            )
        )
    return found


def _present(snapshot: OrgSnapshot, target: SlurmTarget, keys: set[str]) -> set[int]:
    anchors = {u for (u, f, r), q in snapshot.quotas.items() if f in keys and r is Resource.GPU and q.ceiling > 0}
    anchors |= {u for u, members in target.members.items() if members}
    present: set[int] = set()
    for uid in anchors:
        if uid in snapshot.units:
            present.add(uid)
            present.update(snapshot.ancestors(uid))
    return present


def _top_down(snapshot: OrgSnapshot, present: set[int]) -> list[int]:
    order: list[int] = []
    pending = sorted((r for r in snapshot.roots() if r in present), key=lambda u: snapshot.units[u].slug)
    while pending:
        uid = pending.pop(0)
        order.append(uid)
        pending += sorted(
            (c for c in snapshot.children.get(uid, ()) if c in present), key=lambda u: snapshot.units[u].slug
        )
    return order


def _one_default(users: list[SlurmUser]) -> list[SlurmUser]:
    """A user in several accounts keeps one DefaultAccount: the first of their accounts by name."""
    first: dict[str, str] = {}
    for user in users:
        first.setdefault(user.name, user.account)
    return [SlurmUser(u.name, u.account, first[u.name], u.fairshare) for u in users]


def slurm_cluster_name(connection_ref: str) -> str:
    """``slurm:<cluster name in slurmdbd>`` → the name; ValueError saying the form otherwise."""
    kind, _, name = connection_ref.partition(":")
    if kind != "slurm" or not name:
        raise ValueError(f"connection_ref {connection_ref!r}: use 'slurm:<cluster name in slurmdbd>', e.g. slurm:lab")
    return name.lower()
