"""Why a workload waits, and what would make it run (issue #44): ranked causes in Allot's own terms, each
with its evidence, and ways out checked against the live state. Pure: the org snapshot and a live view of
one cluster (what each admitted workload holds, what waits) in, an ``Explanation`` out.

Kueue says one representative reason (``QuotaReserved=False``, "insufficient unused quota … 4 more
needed"); Allot knows what that means for the unit: whose jobs hold its guarantee, which borrowers hold
what it lent and by when its contract promises them back, which budget holds it, which pin keeps it off
a flavor with room, who is ahead of it in its queue. The scheduler's own words are kept as evidence.

Counts are a flavor's devices (``nvidia.com/gpu``); the ceiling of a unit is its guarantee plus its
burst, and each ancestor's ceiling bounds its subtree, as the compiled cohorts do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from accounting.policy.waiting_model import Cause, Explanation, Holding, LiveView, Pending, WayOut
from quotas.policy.budgets import BudgetAction, period_bounds
from quotas.policy.quantity import Resource
from quotas.policy.sharing import MIG_PREFIX, equivalents, show
from quotas.policy.snapshot import OrgSnapshot

__all__ = ["Cause", "Explanation", "Holding", "LiveView", "Pending", "WayOut", "explain"]

GPU = Resource.GPU
STOPPING = (BudgetAction.HOLD, BudgetAction.DENY)


@dataclass(frozen=True)
class _Flavor:
    key: str
    guarantee: int
    ceiling: int
    held: int
    free: int
    limit_by: str
    """The unit (path) whose ceiling bounds the room: the unit itself or an ancestor."""

    @property
    def room(self) -> int:
        return max(0, min(self.ceiling - self.held, self.free))


def _held(view: LiveView, units: set[int], flavor: str) -> int:
    return sum(view.held_by.get((u, flavor), 0) for u in units)


def _subtree(snapshot: OrgSnapshot, unit_id: int) -> set[int]:
    out, todo = {unit_id}, [unit_id]
    while todo:
        for child in snapshot.children.get(todo.pop(), ()):
            out.add(child)
            todo.append(child)
    return out


def _flavor(snapshot: OrgSnapshot, view: LiveView, unit_id: int, key: str) -> _Flavor:
    quota = snapshot.quota(unit_id, key, GPU)
    held = _held(view, _subtree(snapshot, unit_id), key)
    ceiling, limit_by = quota.ceiling, snapshot.path(unit_id)
    for ancestor in snapshot.ancestors(unit_id):  # each parent's ceiling bounds its subtree
        above = snapshot.quota(ancestor, key, GPU).ceiling
        if above and above < ceiling:
            ceiling, limit_by = above, snapshot.path(ancestor)
    return _Flavor(key, quota.guarantee, ceiling, held, _free(snapshot, view, unit_id, key, held), limit_by)


def _free(snapshot: OrgSnapshot, view: LiveView, unit_id: int, key: str, held: int) -> int:
    """What the unit could get on the flavor now beyond what its subtree holds: the pool (the roots'
    guarantees, else the physical devices) less what everyone holds, less the idle guarantee other queue
    units keep for themselves (guarantee − lendable: Kueue's lendingLimit keeps it out of the cohort)."""
    physical = snapshot.flavors[key].physical_devices if key in snapshot.flavors else 0
    pool = sum(snapshot.quota(r, key, GPU).guarantee for r in snapshot.roots()) or physical
    own = _subtree(snapshot, unit_id)
    kept = 0
    for uid in snapshot.units:
        if uid in own or any(snapshot.quota(c, key, GPU).ceiling for c in snapshot.children.get(uid, ())):
            continue  # its own subtree, or a parent (its children's queues hold its quota)
        quota = snapshot.quota(uid, key, GPU)
        kept += max(0, quota.guarantee - quota.lendable - view.held_by.get((uid, key), 0))
    return max(0, min(pool, physical or pool) - view.held_by.get((None, key), 0) - kept)


def _named(items: Sequence[Holding], limit: int = 5, *, own: bool = False) -> str:
    """The largest first: ``ns/name (4 devices, 2 borrowed, erin)``; another unit's work by its unit's path."""
    shown = [
        f"{h.name} ({h.devices} devices{f', {h.borrowed} borrowed' if h.borrowed else ''}, "
        f"{(h.owner or 'no owner') if own else (h.unit or 'no unit')})"
        for h in sorted(items, key=lambda h: (-h.devices, h.name))[:limit]
    ]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(shown) + more if shown else "nothing named"


def _whole(devices: int, per_pod: int) -> int:
    """The most devices in whole pods: a pod's devices come together."""
    return devices - devices % per_pod if per_pod > 1 else devices


def explain(snapshot: OrgSnapshot, view: LiveView, target: Pending, *, now: datetime) -> Explanation:
    ask, uid = target.ask, target.unit_id
    says = f"{ask.reason}: {ask.message}" if ask.reason or ask.message else ""
    if uid is None or uid not in snapshot.units:
        cause = Cause(
            "no-unit", "its namespace is bound to no unit in Allot", ("bind the namespace to its team's unit",), 100
        )
        return Explanation(target.name, "", ask.devices, (cause,), (), says, view.observed_at)
    path = snapshot.path(uid)
    candidates = [k for k in view.flavors if target.flavors is None or k in target.flavors]
    if ask.slices:
        return _slices(snapshot, view, target, path, candidates, says)
    if ask.flavor:
        candidates = [k for k in candidates if k.split("/", 1)[-1] == ask.flavor]
    flavors = {k: _flavor(snapshot, view, uid, k) for k in view.flavors}
    usable = [flavors[k] for k in candidates if flavors[k].ceiling > 0]
    causes: list[Cause] = []
    ways: list[WayOut] = []
    need, per_pod = ask.devices, max(1, ask.per_pod)
    contract = snapshot.effective_contract(uid)
    own = _subtree(snapshot, uid)

    held, raises = _budget_causes(snapshot, uid, target, candidates, flavors)
    causes += held
    ways += raises
    if ask.checks:
        causes.append(Cause("admission-check", f"admission checks still pending: {', '.join(ask.checks)}", (), 90))
    if target.flavors == ():
        causes.append(Cause("pin", "its placement matches no flavor of the cluster: it would wait forever", (), 85))
    elif not usable:
        where = ", ".join(candidates) or "any flavor"
        causes.append(
            Cause(
                "no-quota", f"{path} has no quota on {where}", ("ask for quota in Allot, or use a flavor it has",), 85
            )
        )
    elif need > max(f.ceiling for f in usable):
        best = max(usable, key=lambda f: f.ceiling)
        causes.append(
            Cause(
                "beyond-ceiling",
                f"asks for {need} devices; {best.limit_by} may hold at most {best.ceiling} on {best.key}",
                (f"guarantee {best.guarantee}, ceiling {best.ceiling} (guarantee + burst, bounded by its parents)",),
                80,
            )
        )
    fits = [f for f in usable if f.room >= need]
    for f in list(fits):  # room in quota, but is there a node with room for one of its pods?
        block = view.blocks.get(f.key)
        if block is not None and per_pod > block:
            fits.remove(f)
            causes.append(Cause("fragmentation", f"{f.key} has {f.free} devices free, but no node has {per_pod} free "
                                f"for one of its pods: the largest free block is {block}", (), 65))  # fmt: skip
            if block:
                ways.append(WayOut("smaller", f"split it into pods of at most {block} devices each", need, f.key))
    for f in usable if not fits else ():
        if f.room >= need:
            continue  # room in quota: what keeps it off is said above (fragmentation)
        mine = [h for h in view.holding if h.flavor == f.key and h.unit_id in own]
        lent = [h for h in view.holding if h.flavor == f.key and h.borrowed and h.unit_id not in own]
        if f.held + need <= f.guarantee and f.free < need:
            deadline = (
                (target.created + timedelta(seconds=contract.reclaim_within_s)) if contract and target.created else None
            )
            late = deadline is not None and now > deadline
            evidence = [
                f"its guarantee on {f.key} is {f.guarantee}; its own work holds {f.held}",
                f"lent devices held by borrowers: {_named(lent)}",
            ]
            if contract:
                evidence.append(
                    f"contract {contract.name}: lent devices come back within {contract.reclaim_within_s // 60} min"
                    + (f", by {deadline:%Y-%m-%d %H:%M} UTC" if deadline else "")
                    + (" — overdue: the promise is broken" if late else "")
                )
            causes.append(
                Cause(
                    "reclaim",
                    f"its guarantee on {f.key} is lent out and being reclaimed",
                    tuple(evidence),
                    75 if late else 55,
                )
            )
            if lent:
                ways.append(
                    WayOut(
                        "wait-reclaim",
                        f"wait for {f.key} to come back from {_named(lent, 3)}",
                        need,
                        f.key,
                        by=deadline,
                    )
                )
        elif f.held + need > f.ceiling:
            causes.append(
                Cause(
                    "borrowing-limit",
                    f"{f.limit_by} has reached its ceiling on {f.key}: holds {f.held} + asks {need} > {f.ceiling}",
                    (f"guarantee {f.guarantee}, ceiling {f.ceiling}", f"its own work: {_named(mine, own=True)}"),
                    60,
                )
            )
            if mine:
                ways.append(
                    WayOut(
                        "wait-finish",
                        f"wait for its own work on {f.key} to finish: {_named(mine, 3, own=True)}",
                        need,
                        f.key,
                    )
                )
            if f.free >= need and f.limit_by == path:
                ceiling_needed = f.held + need
                ways.append(
                    WayOut(
                        "quota-change",
                        f"raise {path}'s burst on {f.key} to {ceiling_needed - f.guarantee}",
                        need,
                        f.key,
                        change={"guarantee": f.guarantee, "burst": ceiling_needed - f.guarantee},
                    )
                )
        else:
            others = [h for h in view.holding if h.flavor == f.key and h.unit_id not in own]
            causes.append(
                Cause(
                    "flavor-full",
                    f"{f.key} has {f.free} free and it needs {need}: the rest is held by other units' work",
                    (f"held by: {_named(others)}",),
                    50,
                )
            )
    if not fits and target.flavors is not None and target.flavors != ():
        unpinned = [flavors[k] for k in view.flavors if k not in candidates and flavors[k].room >= need]
        for f in unpinned:
            causes.append(Cause("pin", f"pinned to {', '.join(candidates)}, while {f.key} has room for it", (), 45))
            ways.append(WayOut("other-flavor", f"let it run on {f.key} (drop or widen its pin)", need, f.key))
    best_room = max((_whole(f.room, per_pod) for f in usable), default=0)
    if not fits and 0 < best_room < need:
        at = max(usable, key=lambda f: _whole(f.room, per_pod))
        ways.append(
            WayOut("smaller", f"ask for {best_room} devices: that would start now on {at.key}", best_room, at.key)
        )
    ahead = _ahead(snapshot, view, target)
    if ahead:
        names = ", ".join(p.name for p in ahead[:5]) + (f" and {len(ahead) - 5} more" if len(ahead) > 5 else "")
        causes.append(
            Cause("queue", f"behind {len(ahead)} workloads of {path} in its queue", (names,), 40 if fits else 30)
        )
    if fits and not ahead and not causes:
        causes.append(
            Cause(
                "scheduling",
                f"{fits[0].key} has room for it now: the scheduler has not admitted it yet",
                (says or "the scheduler gave no reason",),
                10,
            )
        )
    causes.sort(key=lambda c: -c.rank)
    room = {
        f.key: {"guarantee": f.guarantee, "ceiling": f.ceiling, "held": f.held, "free": f.free, "room": f.room}
        for f in usable
    }
    return Explanation(target.name, path, need, tuple(causes), tuple(ways), says, view.observed_at, room)


def _budget_causes(
    snapshot: OrgSnapshot, uid: int, target: Pending, candidates: Sequence[str], flavors: Mapping[str, _Flavor]
) -> tuple[list[Cause], list[WayOut]]:
    """Each spent budget of the unit or above it that applies to the job's tier, and for one that holds it the
    raise that would release it (whoever may set that budget: the owner of the unit above)."""
    found, ways = [], []
    for key in candidates:
        for owner in [uid, *snapshot.ancestors(uid)]:
            budget = snapshot.budgets.get((owner, key))
            spend = snapshot.budget_spend.get((owner, key))
            if budget is None or spend is None or not spend.exhausted:
                continue
            if budget.tiers and target.tier and target.tier not in budget.tiers:
                continue
            spent = f"{snapshot.path(owner)} spent {spend.spent:.0f} of {spend.allowance:.0f} device-hours on {key}"
            if budget.action in STOPPING:
                since = f", since {spend.exhausted_at:%Y-%m-%d %H:%M} UTC" if spend.exhausted_at else ""
                resets = period_bounds(budget.period, spend.period_start)[1]
                found.append(
                    Cause(
                        "budget",
                        f"held: {spent} ({budget.action.value}{since})",
                        (f"until the period resets on {resets:%Y-%m-%d} UTC, or a budget raise",),
                        95,
                    )
                )
                above = math.floor(spend.spent) + 1
                ways.append(
                    WayOut(
                        "budget",
                        f"a raise of {snapshot.path(owner)}'s {budget.period.value} budget on {key} to more than its "
                        f"{spend.spent:.0f} device-hours spent (at least {above}, and as many more as its work will "
                        f"run), or wait for {resets:%Y-%m-%d} UTC",
                        None,
                        key,
                    )
                )
            elif (
                budget.action is BudgetAction.NO_BORROWING
                and flavors[key].held + target.ask.devices > flavors[key].guarantee
            ):
                found.append(
                    Cause("budget", f"may not borrow: {spent}", ("it may still run inside its guarantee",), 65)
                )
    return found, ways


def _ahead(snapshot: OrgSnapshot, view: LiveView, target: Pending) -> list[Pending]:
    """Pending work of the same queue the scheduler takes first: a higher tier, or the same tier and older."""
    mine = snapshot.tiers.get(target.tier)
    rank = mine.priority if mine else 0
    out = []
    for p in view.pending:
        if p.name == target.name or p.queue != target.queue or p.unit_id != target.unit_id:
            continue
        theirs = snapshot.tiers.get(p.tier)
        other = theirs.priority if theirs else 0
        older = p.created is not None and target.created is not None and p.created < target.created
        if other > rank or (other == rank and older):
            out.append(p)
    return out


def _slices(
    snapshot: OrgSnapshot, view: LiveView, target: Pending, path: str, candidates: list[str], says: str
) -> Explanation:
    """A workload of slices of a shared flavor: what they weigh in GPU-equivalents against the unit's ceiling on the
    flavors that offer them. The step-by-step causes below count whole devices, not slices yet: past the ceiling
    check, Kueue's own word is the explanation."""
    asked = dict(target.ask.slices)
    offering = [
        k for k in candidates if k in snapshot.flavors and set(asked) <= set(snapshot.flavors[k].sharing.weights())
    ]
    what = " + ".join(f"{n} × {r.removeprefix(MIG_PREFIX)}" for r, n in sorted(asked.items()))
    if not offering:
        cause = Cause(
            "no-quota",
            f"no flavor it may run on offers {what}",
            ("ask for a profile a shared flavor of the cluster offers (the unit page lists them)",),
            85,
        )
        return Explanation(target.name, path, 0, (cause,), (), says, view.observed_at)
    limits = []
    for key in offering:
        flavor = _flavor(snapshot, view, target.unit_id or 0, key)
        weighs = equivalents(asked, snapshot.flavors[key].sharing.weights())
        limits.append((flavor.ceiling - weighs, key, weighs, flavor))
    _, key, weighs, best = max(limits)
    if weighs > best.ceiling:
        cause = Cause(
            "beyond-ceiling",
            f"asks for {_equivalents(weighs)} ({what}); {best.limit_by} may hold at most {best.ceiling} on "
            f"{key}",
            (f"guarantee {best.guarantee}, ceiling {best.ceiling} GPU-equivalents (guarantee + burst, bounded by "
             "its parents)",),
            80,
        )  # fmt: skip
    else:
        cause = Cause(
            "slices",
            f"asks for {_equivalents(weighs)} ({what}) on {key}, within {best.limit_by}'s ceiling of "
            f"{best.ceiling}: Allot does not explain a wait for slices further yet — Kueue's own word is below",
            (),
            40,
        )
    return Explanation(target.name, path, 0, (cause,), (), says, view.observed_at)


def _equivalents(value: Fraction) -> str:
    return f"{show(value)} GPU-equivalent{'' if value == 1 else 's'}"
