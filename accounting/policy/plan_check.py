"""A plan checked as one change: the edit path's own checks plus every contract promise the change would
newly break (``check_promises``), with a fast pre-check of whether an edit adds a (lender, borrower)
pair at all (:class:`Promises`). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from accounting.policy.plan_model import GPU
from quotas.policy.contracts import check_promises
from quotas.policy.invariants import check_quota_edits
from quotas.policy.snapshot import OrgSnapshot, Quota, QuotaKey
from quotas.policy.violations import Violation


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


class Promises:
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
