"""The governance plan: one set of quota changes per organisation (or department) and period that
passes every invariant *as one change*, built from the period's real demand. Pure.

Per flavor and per parent, the parent's guarantee is shared among its children that have demand
evidence (the others keep theirs):

* each child's **need** per step is what it held, plus — where its queue was quota-bound (see
  ``backtest.classify``) — its fragment and its queued devices: the guarantee that would have served
  that step whole. The *value* of a child's g-th device is the device-hours of need above g − 1
  (``need_curve``): non-increasing in g, so handing devices out one at a time to the highest value is
  the best split of a fixed total;
* a device is guaranteed only when it is needed in at least ``min_need_share`` of the period's steps
  (default 5 %: the guarantee covers the 95th percentile of need; rarer peaks borrow);
* a unit with units inside it and usage of its own is planned like the others, never below its
  children's sum, and before its children (its planned guarantee is what they share);
* a guarantee never goes below the child's own demand evidence (the 95th percentile of what it held)
  nor its children's sum, and moves at most ``max_move_share`` of the period's guarantee (at least
  ``max_move_min`` devices) in one cycle: a guarantee is a promise people planned against;
* a child left with idle guaranteed devices lends them (lendable = guarantee − p95 held, on flavors
  where lending is declared), and a child whose need outgrows its guarantee may borrow up to its p95
  of need (burst), within its parent's ceiling;
* when the children want more than the parent holds, the plan says so (``Unmet``) and names what
  would have to give, instead of proposing the impossible.

Everything is decided from the evidence and the period's quotas, never from the plan's own output,
so applying a plan and planning again proposes nothing new. :func:`.plan_check.check_plan` (the edit path's own
checks plus every contract promise the change would newly break) must pass: items that would not are
dropped, with the reason, until it does."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from accounting.policy.plan_check import Promises, check_plan
from accounting.policy.plan_model import GPU, Evidence, Item, Plan, Settings, Unmet, Verdict
from quotas.policy.invariants import check_quota_edits
from quotas.policy.snapshot import OrgSnapshot, Quota


def make_plan(
    snapshot: OrgSnapshot, evidence: Sequence[Evidence], *, lends_idle: Mapping[str, bool], settings: Settings
) -> Plan:
    """The plan for the units of ``evidence`` (see the module docstring)."""
    by_parent: dict[tuple[int, str], list[Evidence]] = {}
    kept: dict[tuple[int, str], str] = {}
    for e in evidence:
        unit = snapshot.units.get(e.unit)
        if unit is None or unit.parent_id is None or unit.parent_id not in snapshot.units:
            kept[(e.unit, e.flavor)] = "not a unit the plan can change (archived, or a top-level unit)"
        else:
            by_parent.setdefault((unit.parent_id, e.flavor), []).append(e)
    targets: dict[tuple[int, str], Quota] = {}
    values: dict[tuple[int, str], tuple[float, str]] = {}
    unmet: list[Unmet] = []
    # parents first: a unit planned in its parent's group is the budget of its own children's group
    order = sorted(by_parent, key=lambda k: (len(snapshot.ancestors(k[0])), k))
    for parent, flavor in order:
        group = by_parent[(parent, flavor)]
        _plan_group(snapshot, parent, flavor, sorted(group, key=lambda e: e.unit), lends_idle, settings, targets,
                    values, unmet)  # fmt: skip
    return _feasible(snapshot, targets, values, kept, unmet, settings)


def _plan_group(
    snapshot: OrgSnapshot,
    parent: int,
    flavor: str,
    group: list[Evidence],
    lends_idle: Mapping[str, bool],
    s: Settings,
    targets: dict[tuple[int, str], Quota],
    values: dict[tuple[int, str], tuple[float, str]],
    unmet: list[Unmet],
) -> None:
    planned = {e.unit for e in group}
    top = targets.get((parent, flavor)) or snapshot.quota(parent, flavor, GPU)
    others = sum(
        snapshot.quota(c, flavor, GPU).guarantee for c in snapshot.children.get(parent, ()) if c not in planned
    )
    budget = top.guarantee - others
    floors, caps = {}, {}
    for e in group:
        ref = e.reference.guarantee
        move = max(s.max_move_min, math.ceil(s.max_move_share * ref))
        floors[e.unit] = max(_children_sum(snapshot, e.unit, flavor), min(ref, max(e.p95_held, ref - move)))
        caps[e.unit] = max(floors[e.unit], ref + move)
    if sum(floors.values()) > budget:
        for e in group:  # the tree is already over its parent's guarantee: nothing sound to propose
            values[(e.unit, flavor)] = (0.0, f"{snapshot.path(parent)}'s children already exceed its guarantee")
        return
    level = dict(floors)
    heap: list[tuple[float, int]] = []
    worth = {e.unit: s.min_need_share * e.hours for e in group}
    curves = {e.unit: e.curve for e in group}

    def push(uid: int) -> None:
        g = level[uid]
        if g < caps[uid] and g < len(curves[uid]) and curves[uid][g] >= worth[uid] and curves[uid][g] > 0:
            heapq.heappush(heap, (-curves[uid][g], uid))

    for e in group:
        push(e.unit)
    left = budget - sum(level.values())
    while heap and left > 0:
        _, uid = heapq.heappop(heap)
        level[uid] += 1
        left -= 1
        push(uid)
    if heap:
        wanted: dict[int, tuple[int, float]] = {}
        for e in group:
            curve, g, more, value = curves[e.unit], level[e.unit], 0, 0.0
            while g + more < min(caps[e.unit], len(curve)) and curve[g + more] >= worth[e.unit]:
                value += curve[g + more]
                more += 1
            if more:
                wanted[e.unit] = (more, value)
        if wanted:
            unmet.append(_unmet(snapshot, parent, flavor, wanted))
    ceiling = top.ceiling
    for e in group:
        now = snapshot.quota(e.unit, flavor, GPU)
        g = level[e.unit]
        lendable = now.lendable
        if lends_idle.get(flavor) is False:
            lendable = max(lendable, g - e.p95_held)
        lendable = max(0, min(g, lendable))
        burst = now.burst
        if e.p95_need > g:
            burst = max(burst, e.p95_need - g)
        burst = max(0, min(burst, ceiling - g))
        targets[(e.unit, flavor)] = Quota(g, burst, lendable)
        ref = e.reference.guarantee
        curve = curves[e.unit]
        if g > ref:
            gained = sum(curve[ref:g])
            values[(e.unit, flavor)] = (gained, f"its need was above {ref} in {_share(curve, ref, e.hours)} of hours")
        elif g < ref:
            idle = sum(e.hours - (curve[x] if x < len(curve) else 0.0) for x in range(g, ref))
            why = f"its 95th percentile of need was {e.p95_need} of {ref}"
            inside = _children_sum(snapshot, e.unit, flavor)
            if g == inside and g > e.p95_need:
                why += f"; {g} is what the units inside it are guaranteed"
            elif g > e.p95_need and g == ref - max(s.max_move_min, math.ceil(s.max_move_share * ref)):
                why += f"; {ref - g} is as far as a guarantee moves in one cycle"
            values[(e.unit, flavor)] = (idle, why)
        elif g == floors[e.unit] and e.p95_held >= ref:
            values[(e.unit, flavor)] = (0.0, _capped(e, ref, lends_idle.get(flavor) is not False, now.lendable))
        else:
            use = f"it held a median of {e.p50_held} of its {ref}, {_pct(e.idle_share)} of its guarantee-hours idle"
            values[(e.unit, flavor)] = (0.0, f"{use}; 95 % of hours it needed {e.p95_need} or fewer")


def _pct(share: float) -> str:
    """One rounding for every share the plan states: whole percent."""
    return f"{round(100 * share)} %"


def _capped(e: Evidence, ref: int, lends_idle: bool, lendable: int) -> str:
    """Why the plan keeps a guarantee the unit held whole at its busiest, however idle it was otherwise:
    the figures of its use, the rule, and who uses the idle part meanwhile."""
    use = (
        f"it held a median of {e.p50_held} of its {ref} ({_pct(e.idle_share)} of its guarantee-hours idle over "
        f"{e.hours:,.0f} hours with telemetry), but all {ref} in more than 5 % of hours"
    )
    meanwhile = (
        "others borrow what is idle meanwhile (this cluster lends every idle guarantee)"
        if lends_idle
        else f"others may borrow only its lendable {lendable} of it meanwhile"
    )
    return f"{use}: the plan shrinks a guarantee no lower than what the unit held in 95 % of hours; {meanwhile}"


def _children_sum(snapshot: OrgSnapshot, unit: int, flavor: str) -> int:
    return sum(snapshot.quota(c, flavor, GPU).guarantee for c in snapshot.children.get(unit, ()))


def _share(curve: tuple[float, ...], level: int, hours: float) -> str:
    above = curve[level] if level < len(curve) else 0.0
    return f"{above / hours:.0%}" if hours else "0%"


def _unmet(snapshot: OrgSnapshot, parent: int, flavor: str, wanted: Mapping[int, tuple[int, float]]) -> Unmet:
    path = snapshot.path(parent)
    grand = snapshot.units[parent].parent_id
    devices = sum(n for n, _ in wanted.values())
    if grand is not None and grand in snapshot.units:
        spare = snapshot.quota(grand, flavor, GPU).guarantee - _children_sum(snapshot, grand, flavor)
        gives = (
            f"{path}'s own guarantee: {snapshot.path(grand)} has {spare} unassigned on {flavor}"
            + (f" — ask for {min(spare, devices)} more" if spare > 0 else "")
            + f"; or another unit under {snapshot.path(grand)}; or capacity on {flavor}"
        )
    else:
        gives = f"capacity on {flavor}: {path} is a top-level unit, its guarantee is the flavor's reclaimable capacity"
    names = tuple(snapshot.path(u) for u in sorted(wanted, key=lambda u: -wanted[u][1]))
    return Unmet(path, flavor, devices, sum(v for _, v in wanted.values()), names, gives)


def _verdict(before: Quota, after: Quota) -> Verdict:
    if after.guarantee > before.guarantee:
        return Verdict.GROW
    if after.guarantee < before.guarantee:
        return Verdict.SHRINK
    if after.lendable > before.lendable:
        return Verdict.LEND_MORE
    if after.burst > before.burst:
        return Verdict.MAY_BORROW
    return Verdict.KEEP


def _feasible(
    snapshot: OrgSnapshot,
    targets: Mapping[tuple[int, str], Quota],
    values: Mapping[tuple[int, str], tuple[float, str]],
    kept: dict[tuple[int, str], str],
    unmet: list[Unmet],
    s: Settings,
) -> Plan:
    """Items where the target differs from today, checked as one change; an item a check names is
    dropped (reason kept) until the change passes. Then each item learns which others it needs."""
    changes = {k: q for k, q in targets.items() if q != snapshot.quota(k[0], k[1], GPU)}
    for k in targets:
        if k not in changes:
            kept[k] = values[k][1]
    dropped: list[str] = []
    while changes:
        edits = {(u, f, GPU): q for (u, f), q in changes.items()}
        problems = check_plan(snapshot, edits)
        if not problems:
            break
        named = {p.unit for p in problems}
        culprits = [k for k in changes if snapshot.path(k[0]) in named] or [
            k for k in changes if changes[k].burst > snapshot.quota(k[0], k[1], GPU).burst
        ]
        if not culprits:
            culprits = list(changes)
        for k in culprits:
            before = snapshot.quota(k[0], k[1], GPU)
            softer = replace(changes[k], burst=before.burst) if changes[k].burst > before.burst else None
            if softer is not None and softer != before:
                changes[k] = softer
            else:
                del changes[k]
                kept[k] = "left as it is: " + "; ".join(p.message for p in problems)[:300]
            dropped.append(f"{snapshot.path(k[0])} on {k[1]}: " + problems[0].message)
    ordered = sorted(
        changes.items(),
        key=lambda kv: (-values[kv[0]][0] / _moved(snapshot.quota(kv[0][0], kv[0][1], GPU), kv[1]), kv[0]),
    )
    items = [
        Item(u, snapshot.path(u), f, snapshot.quota(u, f, GPU), q, _verdict(snapshot.quota(u, f, GPU), q),
             values[(u, f)][0], values[(u, f)][1])
        for (u, f), q in ordered
    ]  # fmt: skip
    return Plan(tuple(_with_needs(snapshot, items)), dict(kept), tuple(unmet), tuple(dropped), s)


def _moved(before: Quota, after: Quota) -> int:
    return max(
        abs(after.guarantee - before.guarantee),
        abs(after.lendable - before.lendable),
        abs(after.burst - before.burst),
        1,
    )


def _with_needs(snapshot: OrgSnapshot, items: list[Item]) -> list[Item]:
    """Each item alone, or with the items that make room for it: the shrinks under the same parent on
    the same flavor (a grow needs them), checked again together.

    Alone, an item is checked by the quota checks and by :class:`Promises` (only the pairs it adds
    can break a promise); the whole-tree promise check per item was 60 of 65 seconds for 1,000 teams ×
    4 flavors. Where the pairs check cannot tell, the full :func:`check_plan` decides."""
    promises = Promises(snapshot)
    out = []
    for i, item in enumerate(items):
        alone = {(item.unit, item.flavor, GPU): item.after}
        if check_quota_edits(snapshot, alone):
            feasible = False
        elif promises.safe(item.unit, item.flavor, item.after):
            feasible = True
        else:
            feasible = not check_plan(snapshot, alone)
        if feasible:
            out.append(item)
            continue
        parent = snapshot.units[item.unit].parent_id
        room = tuple(
            j
            for j, other in enumerate(items)
            if j != i
            and other.flavor == item.flavor
            and snapshot.units[other.unit].parent_id == parent
            and other.after.guarantee < other.before.guarantee
        )
        out.append(replace(item, needs=room if room else tuple(j for j in range(len(items)) if j != i)))
    return out
