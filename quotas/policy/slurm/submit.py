"""The policy snapshot Slurm's controller enforces at submission (deploy/slurm/job_submit.lua).

job_submit.lua runs inside slurmctld holding its locks, so it must never call out: Allot publishes
everything it needs as a Lua data file (``loadfile`` returns a table) and the same content as JSON.
Per managed account: the QOS it may use, its default QOS, the most GPUs of each type it can ever
hold (its effective ceiling) and what each of its own QOS lets one job hold at once (a job runs under
one QOS, and Slurm limits each QOS on its own, so a job larger than its QOS's limit would pend
forever); the QOS that carry no GPUs (tiers); the accounts of archived units; the interactive
tier's time limit; each QOS's time limit (a job asking for more is refused with the limit, not left
pending); per GPU type, the spent ``deny`` budget over the account (refused with the budget, its
figures and when it resets); per partition, the GPUs of its smallest node and whether every job there
has its node to itself (a whole-node job is given every GPU of its node: see ``nodes.py``). A MIG flavor's
profiles are GPU types of their own (``slices.py``): each account's ceiling in whole slices per profile,
its ``equivalents`` per MIG flavor, and ``slices`` (per profile type: its flavor and weight in millionths),
so a job mixing profiles is held to the equivalents by weight.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..budget_effects import effects
from ..budgets import BudgetAction
from ..capacity import effective_ceiling
from ..quantity import Resource
from ..sharing import micro
from ..snapshot import OrgSnapshot
from .model import SlurmState
from .nodes import inventory_digest
from .slices import slices
from .translate import SlurmTarget


def submit_policy(
    snapshot: OrgSnapshot,
    target: SlurmTarget,
    state: SlurmState,
    *,
    revision: int,
    archived: Iterable[str] = (),
    inventory: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The snapshot as a dict. ``inventory`` is :func:`nodes.partition_gpus` of the cluster (None when slurmctld
    could not be read: whole-node jobs are then not counted, and the snapshot says so)."""
    by_name = {(target.accounts.get(uid) or unit.slug).lower(): uid for uid, unit in snapshot.units.items()}
    qos_by_name = {q.name: q for q in state.qos}
    denied = _denied(snapshot, target)
    accounts: dict[str, Any] = {}
    for account in state.accounts:
        uid = by_name[account.name]
        ceilings = {f: effective_ceiling(snapshot, uid, f.key, Resource.GPU) for f in target.flavors}
        gpus = {gres: slices(ceilings[f], w) for f in target.flavors for gres, w in f.types}
        accounts[account.name] = {
            "path": snapshot.units[uid].path,
            "qos": sorted(account.qos),
            "default_qos": account.default_qos,
            "gpus": dict(sorted(gpus.items())),
            "qos_gpus": {
                name: {
                    tres.partition(":")[2]: n for tres, n in sorted(qos_by_name[name].grp_tres.items()) if ":" in tres
                }
                for name in sorted(account.qos)
                if name in qos_by_name and qos_by_name[name].grp_tres
            },
        }
        shared = {f.gpu_type: ceilings[f] for f in target.flavors if f.profiles}
        if shared:  # a MIG flavor's slices, added up by weight: GPU-equivalents per flavor
            accounts[account.name]["equivalents"] = dict(sorted(shared.items()))
        if uid in denied:
            accounts[account.name]["budget_denied"] = dict(sorted(denied[uid].items()))
    limits = [t.max_runtime_s for t in snapshot.tiers.values() if t.max_runtime_s]
    return {
        "version": revision,
        "cluster": state.cluster,
        "accounts": dict(sorted(accounts.items())),
        "archived": sorted({a.lower() for a in archived} - set(accounts)),
        "interactive_max_minutes": min(limits) // 60 if limits else None,
        "qos_max_minutes": {q.name: q.max_wall_min for q in sorted(state.qos, key=lambda q: q.name) if q.max_wall_min},
        "qos_without_gpus": sorted(q.name for q in state.qos if q.max_tres.get("gres/gpu") == 0),
        "slices": {
            gres: {"flavor": f.gpu_type, "micro": micro(w)}
            for f in sorted(target.flavors, key=lambda f: f.gpu_type)
            if f.profiles
            for gres, w in f.types
        },
        **(
            {**inventory, "inventory": inventory_digest(dict(inventory))}
            if inventory is not None
            else {"partitions": None, "inventory": None}
        ),
    }


def _denied(snapshot: OrgSnapshot, target: SlurmTarget) -> dict[int, dict[str, str]]:
    """Per unit under a spent ``deny`` budget: GPU type → the refusal's words."""
    if target.at is None or not snapshot.budgets:
        return {}
    types = {f.key: f.gpu_type for f in target.flavors}
    gres = {f.key: [g for g, _ in f.types] for f in target.flavors}
    found: dict[int, dict[str, str]] = {}
    for e in effects(snapshot.budgets, snapshot.budget_spend, snapshot.children, snapshot.tiers, target.at):
        if e.action is not BudgetAction.DENY or e.flavor not in types:
            continue
        spend = snapshot.budget_spend[(e.unit_id, e.flavor)]
        budget = snapshot.budgets[(e.unit_id, e.flavor)]
        words = (
            f"{snapshot.path(e.unit_id)} has spent its {budget.period} {types[e.flavor]} GPU budget "
            f"({spend.spent:,.0f} of {spend.allowance:,.0f} device-hours): new {types[e.flavor]} GPU jobs are "
            f"refused until {e.resets:%Y-%m-%d}, when it resets, or until it is raised in Allot"
        )
        for uid in e.units:
            for kind in gres[e.flavor]:
                found.setdefault(uid, {})[kind] = words
    return found


def render_json(policy: Mapping[str, Any]) -> str:
    return json.dumps(policy, sort_keys=True, indent=1) + "\n"


def render_lua(policy: Mapping[str, Any]) -> str:
    """``return { … }``: a Lua table literal ``loadfile`` can read, keys sorted."""
    return "-- Allot policy snapshot: generated, do not edit.\nreturn " + _lua(policy, 0) + "\n"


def _lua(value: Any, depth: int) -> str:
    pad, inner = "  " * depth, "  " * (depth + 1)
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = [f"{inner}[{_lua(str(k), 0)}] = {_lua(v, depth + 1)}," for k, v in sorted(value.items())]
        return "{\n" + "\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(_lua(v, depth + 1) for v in value) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to Lua")
