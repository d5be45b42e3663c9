"""Snapshot + Slurm cluster → desired accounts, user associations and QOS.

Mapping (DESIGN.md, "Compiling to Slurm"; shared/reference/slurm/NOTES.md §5 and its pitfalls):

* every unit with quota or members on the cluster (and its ancestors) → an account; ``parent`` is
  the parent unit's account (``root`` at the top), ``Fairshare`` the weight (whole numbers);
* members with a Slurm username → user associations, DefaultAccount their unit's account;
* a unit's guarantee → QOS ``guar-<account>`` with ``GrpTRES=gres/gpu:<type>=G`` per flavor, where G
  is what the unit guarantees beyond its children (its residual: children have their own QOS),
  high priority, and ``Preempt=`` every burst QOS — never a GPU ``GrpTRES`` on the account itself
  (pitfall P1: it would count burst usage against siblings' guarantees);
* a unit's burst → QOS ``burst-<account>``: ``GrpTRES`` = burst, low priority,
  ``PreemptMode=requeue``, ``GraceTime`` and ``PreemptExemptTime`` from its contract (grace period,
  minimum run window), ``UsageFactor=0.5`` (borrowed time counts half in fair-share);
* each account may use its own QOS (``DefaultQOS`` = its guarantee QOS);
* QOS come first, preemptees (burst) before preemptors (guarantees); accounts top-down; names
  lowercased (sacctmgr lowercases them anyway).

Deterministic: sorted everywhere, no timestamps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..quantity import Resource
from ..snapshot import OrgSnapshot
from .model import SlurmAccount, SlurmQos, SlurmState, SlurmUser

GUARANTEE_PRIORITY, BURST_PRIORITY = 1000, 10


@dataclass(frozen=True, slots=True)
class SlurmFlavor:
    key: str
    gpu_type: str
    """The ``gres/gpu:<type>`` of the partition's nodes, e.g. ``a100``."""
    billing_weight: float = 1.0


@dataclass(frozen=True, slots=True)
class SlurmTarget:
    cluster: str
    flavors: tuple[SlurmFlavor, ...]
    accounts: Mapping[int, str] = field(default_factory=dict)
    """Account name per unit where it is not the unit's slug."""
    members: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


def compile_slurm(snapshot: OrgSnapshot, target: SlurmTarget) -> SlurmState:
    flavors = sorted(target.flavors, key=lambda f: f.gpu_type)
    keys = {f.key for f in flavors}
    present = _present(snapshot, target, keys)
    name = {uid: (target.accounts.get(uid) or snapshot.units[uid].slug).lower() for uid in present}
    burst_qos, guar_qos = {}, {}
    for uid in sorted(present, key=lambda u: snapshot.units[u].path):
        children = [c for c in snapshot.children.get(uid, ()) if c in present]
        guar, burst = {}, {}
        for flavor in flavors:
            quota = snapshot.quota(uid, flavor.key, Resource.GPU)
            residual = quota.guarantee - sum(snapshot.quota(c, flavor.key, Resource.GPU).guarantee for c in children)
            if residual > 0:
                guar[f"gres/gpu:{flavor.gpu_type}"] = residual
            if quota.burst > 0:
                burst[f"gres/gpu:{flavor.gpu_type}"] = quota.burst
        path = snapshot.units[uid].path
        contract = snapshot.effective_contract(uid)
        if burst:
            burst_qos[uid] = SlurmQos(
                f"burst-{name[uid]}",
                f"borrowing above guarantee {path}".lower(),
                BURST_PRIORITY,
                preempt_mode="requeue",
                grace_time_s=contract.grace_period_s if contract else 0,
                preempt_exempt_s=contract.min_run_window_s if contract else 0,
                usage_factor=0.5,
                grp_tres=burst,
            )
        if guar:
            guar_qos[uid] = guar
    preemptees = tuple(sorted(q.name for q in burst_qos.values()))
    qos = sorted(burst_qos.values(), key=lambda q: q.name) + [
        SlurmQos(
            f"guar-{name[uid]}",
            f"guaranteed gpu quota {snapshot.units[uid].path}".lower(),
            GUARANTEE_PRIORITY,
            preempt=preemptees,
            grp_tres=tres,
        )
        for uid, tres in sorted(guar_qos.items(), key=lambda kv: name[kv[0]])
    ]
    accounts = []
    for uid in _top_down(snapshot, present):
        unit = snapshot.units[uid]
        own = tuple(
            sorted(
                n
                for n in (
                    f"guar-{name[uid]}" if uid in guar_qos else "",
                    f"burst-{name[uid]}" if uid in burst_qos else "",
                )
                if n
            )
        )
        root = snapshot.units[(snapshot.ancestors(uid) or [uid])[-1]]
        accounts.append(
            SlurmAccount(
                name[uid],
                name[unit.parent_id] if unit.parent_id in present else "root",
                max(1, round(unit.weight)),
                f"{unit.kind} {unit.path}".lower(),
                root.slug.lower(),
                own,
                f"guar-{name[uid]}" if uid in guar_qos else (own[0] if own else ""),
            )
        )
    users = sorted(
        {
            SlurmUser(u.lower(), name[uid], name[uid])
            for uid, members in target.members.items()
            if uid in present
            for u in members
        },
        key=lambda u: (u.name, u.account),
    )
    billing = {f.key: f"CPU=1.0,Mem=0.25G,GRES/gpu:{f.gpu_type}={f.billing_weight * 10:g}" for f in flavors}
    return SlurmState(target.cluster, tuple(accounts), tuple(_one_default(users)), tuple(qos), billing)


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
