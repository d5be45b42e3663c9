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
so applying a plan and planning again proposes nothing new. :func:`check_plan` (the edit path's own
checks plus every contract promise the change would newly break) must pass: items that would not are
dropped, with the reason, until it does.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

import numpy as np

from quotas.policy.contracts import check_promises
from quotas.policy.invariants import check_quota_edits
from quotas.policy.quantity import Resource
from quotas.policy.snapshot import OrgSnapshot, Quota, QuotaKey
from quotas.policy.violations import Violation

from .backtest import FlavorDemand, Terms, classify

GPU = Resource.GPU


@dataclass(frozen=True)
class Settings:
    max_move_share: float = 0.5
    """At most this share of a guarantee moves in one cycle…"""
    max_move_min: int = 8
    """…or this many devices (one 8-GPU node), whichever is more."""
    min_need_share: float = 0.05
    """A device is guaranteed when needed in at least this share of the steps (p95 of need)."""

    def problems(self) -> list[str]:
        found = []
        if not 0 < self.max_move_share <= 1:
            found.append(f"max_move_share = {self.max_move_share}: give a share above 0 and at most 1 (e.g. 0.5)")
        if not 0 <= self.max_move_min <= 10_000:
            found.append(f"max_move_min = {self.max_move_min}: give 0 to 10000 devices")
        if not 0 < self.min_need_share < 1:
            found.append(f"min_need_share = {self.min_need_share}: give a share between 0 and 1 (e.g. 0.05)")
        return found


class Verdict(StrEnum):
    KEEP = "keep"
    GROW = "grow"
    SHRINK = "shrink"
    LEND_MORE = "lend more"
    MAY_BORROW = "may borrow"


@dataclass(frozen=True)
class Evidence:
    """One leaf unit on one flavor over the period."""

    unit: int
    flavor: str
    reference: Terms
    """The guarantee (burst, lendable) in force during the period."""
    curve: tuple[float, ...]
    """``curve[g]``: device-hours of need above g devices (the value of the (g+1)-th device)."""
    p95_held: int
    p95_need: int
    hours: float
    """Hours with telemetry."""


def need_curve(need: np.ndarray, hours_per_step: float) -> tuple[float, ...]:
    """``curve[g] = Σ_t clip(need_t − g, 0, 1) × hours``: the device-hours the (g+1)-th device serves."""
    values = np.sort(np.asarray(need, dtype=np.float64))
    if values.size == 0 or values[-1] <= 0:
        return ()
    top = math.ceil(float(values[-1]))
    suffix = np.concatenate([np.cumsum(values[::-1])[::-1], [0.0]])
    levels = np.arange(top + 1, dtype=np.float64)
    idx = np.searchsorted(values, levels, side="right")
    above = suffix[idx] - levels * (values.size - idx)  # Σ max(0, need − g)
    return tuple(float(x) * hours_per_step for x in above[:-1] - above[1:])


def evidence(d: FlavorDemand) -> list[Evidence]:
    """Each unit's evidence from its series (steps without telemetry left out)."""
    bound_queue, fragment, _ = classify(d)
    need = d.held + fragment + bound_queue
    hours = d.step_minutes / 60.0
    out = []
    for i, unit in enumerate(d.units):
        mask = d.present[i]
        if not mask.any():
            continue
        mine = need[i][mask]
        out.append(
            Evidence(
                unit,
                d.flavor,
                d.observed.get(unit, Terms(0)),
                need_curve(mine, hours),
                math.ceil(float(np.percentile(d.held[i][mask], 95)) - 1e-9),
                math.ceil(float(np.percentile(mine, 95)) - 1e-9),
                float(mask.sum()) * hours,
            )
        )
    return out


@dataclass(frozen=True)
class Item:
    unit: int
    path: str
    flavor: str
    before: Quota
    after: Quota
    verdict: Verdict
    value_h: float
    """Device-hours of queued need served (grow) or of idle guarantee handed back (shrink, lend)."""
    reason: str
    needs: tuple[int, ...] = ()
    """Indexes of the items it is feasible with; empty: feasible on its own."""

    @property
    def moved(self) -> int:
        return max(
            abs(self.after.guarantee - self.before.guarantee),
            abs(self.after.lendable - self.before.lendable),
            abs(self.after.burst - self.before.burst),
            1,
        )

    @property
    def value_per_device(self) -> float:
        return self.value_h / self.moved


@dataclass(frozen=True)
class Unmet:
    parent: str
    flavor: str
    devices: int
    value_h: float
    units: tuple[str, ...]
    gives: str
    """What would have to give."""


@dataclass(frozen=True)
class Plan:
    items: tuple[Item, ...]
    kept: Mapping[tuple[int, str], str]
    """Units with evidence the plan leaves alone, and why."""
    unmet: tuple[Unmet, ...] = ()
    dropped: tuple[str, ...] = ()
    settings: Settings = field(default_factory=Settings)

    def edits(self, only: Iterable[int] | None = None) -> dict[QuotaKey, Quota]:
        chosen = range(len(self.items)) if only is None else only
        return {(self.items[i].unit, self.items[i].flavor, GPU): self.items[i].after for i in chosen}

    def terms(self) -> dict[tuple[int, str], Terms]:
        return {(i.unit, i.flavor): Terms(i.after.guarantee, i.after.burst, i.after.lendable) for i in self.items}


def check_plan(snapshot: OrgSnapshot, edits: Mapping[QuotaKey, Quota]) -> list[Violation]:
    """The edit path's checks on the whole change, plus each contract promise it newly breaks."""
    found = check_quota_edits(snapshot, edits)
    if found or not _new_lender_or_borrower(snapshot, edits):
        return found
    before = {(v.unit, v.flavor): v.actual or 0 for v in check_promises(snapshot)}
    after = check_promises(replace(snapshot, quotas=MappingProxyType({**snapshot.quotas, **edits})))
    return [v for v in after if (v.unit, v.flavor) not in before or (v.actual or 0) > before[(v.unit, v.flavor)]]


def _new_lender_or_borrower(snapshot: OrgSnapshot, edits: Mapping[QuotaKey, Quota]) -> bool:
    """Only an edit that makes a unit a borrower (burst from 0) or a lender (lendable, or on a flavor
    that lends idle guarantees a guarantee, from 0) can break a promise."""
    for key, q in edits.items():
        if key[2] is not GPU:
            continue
        now = snapshot.quota(*key)
        if any(getattr(q, f) > 0 and getattr(now, f) == 0 for f in ("burst", "lendable", "guarantee")):
            return True
    return False


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
            held = f"95 % of hours it held {e.p95_held} or fewer of {ref}: no idle part to give"
            values[(e.unit, flavor)] = (0.0, held)
        else:
            values[(e.unit, flavor)] = (0.0, f"95 % of hours needed {e.p95_need} or fewer of {ref}")


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

    Alone, an item is checked by the quota checks and by :class:`_Promises` (only the pairs it adds
    can break a promise); the whole-tree promise check per item was 60 of 65 seconds for 1,000 teams ×
    4 flavors. Where the pairs check cannot tell, the full :func:`check_plan` decides."""
    promises = _Promises(snapshot)
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


class _Promises:
    """Today's lenders and borrowers per flavor, to tell whether one edit adds a (lender, borrower)
    pair that breaks a promise: a borrower that may keep devices longer than a lender of the same
    organisation, outside its own line, promises them back (``quotas.policy.contracts.check_promises``)."""

    def __init__(self, snapshot: OrgSnapshot) -> None:
        from quotas.policy.contracts import worst_case_reclaim_s

        self.snapshot = snapshot
        self.lenders: dict[str, list[tuple[int, int]]] = {}
        self.borrowers: dict[str, list[tuple[int, int]]] = {}
        self._worst = worst_case_reclaim_s
        for (uid, flavor, resource), q in snapshot.quotas.items():
            if resource is not GPU or uid not in snapshot.units:
                continue
            if q.burst > 0:
                self.borrowers.setdefault(flavor, []).append((-self.held(uid), uid))
            promise = self.promise(uid)
            if self._lends(flavor, q) and promise is not None:
                self.lenders.setdefault(flavor, []).append((promise, uid))
        for found in (*self.lenders.values(), *self.borrowers.values()):
            found.sort()

    def held(self, uid: int) -> int:
        contract = self.snapshot.effective_contract(uid)
        return self._worst(contract, self.snapshot.scheduling_pass_s) if contract else self.snapshot.scheduling_pass_s

    def promise(self, uid: int) -> int | None:
        contract = self.snapshot.effective_contract(uid)
        return contract.reclaim_within_s if contract else None

    def _lends(self, flavor: str, q: Quota) -> bool:
        known = self.snapshot.flavors.get(flavor)
        return q.lendable > 0 or (q.guarantee > 0 and known is not None and known.lends_idle_guarantees)

    def _apart(self, a: int, b: int) -> bool:
        line_a, line_b = self.snapshot.ancestors(a), self.snapshot.ancestors(b)
        same_root = (line_a or [a])[-1] == (line_b or [b])[-1]
        return same_root and a not in line_b and b not in line_a and a != b

    def safe(self, uid: int, flavor: str, after: Quota) -> bool:
        """True when the edit adds no pair that breaks a promise; False: ask the full check."""
        now = self.snapshot.quota(uid, flavor, GPU)
        if after.burst > 0 and now.burst == 0:
            held = self.held(uid)
            for promise, lender in self.lenders.get(flavor, ()):
                if promise >= held:
                    break
                if self._apart(lender, uid):
                    return False
        mine = self.promise(uid)
        if mine is not None and self._lends(flavor, after) and not self._lends(flavor, now):
            for negative, borrower in self.borrowers.get(flavor, ()):
                if -negative <= mine:
                    break
                if self._apart(uid, borrower):
                    return False
        return True
