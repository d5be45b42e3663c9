"""The reclaims of a window — runs inside their unit's guarantee that asked while devices of that guarantee
were lent, timed from the ask to the admission — read by the contract finding, the fairness report, the
review and the reclaim SLO (a read of its own, so the selectors and the findings service need not import
each other). Two kinds (issue #44.4):

* a borrower on the same flavor was preempted between the ask and the admission (Kueue's
  ``evicted Preempted``, Slurm's ``PREEMPTED``): the wait splits at the preemption into the decision (ask →
  preemption) and the re-admission (preemption → admission);
* no borrower was preempted, though another unit held borrowed devices of the flavor when it asked and
  the unit's own work held less than its guarantee less the ask: the owner waited while the lent devices
  stayed with borrowers (what a real Kueue does with borrowers of the owner's tier when reclaim is set to
  LowerPriority). Before, such asks were not counted at all.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import F, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounting.models import HELD, Allocation
from accounting.policy.hold_findings import Reclaim
from quotas.history import org_snapshot_as_of
from quotas.policy.quantity import Resource
from quotas.policy.snapshot import OrgSnapshot

PREEMPTED = Q(raw_state__startswith="PREEMPTED") | Q(raw_state__startswith="evicted Preempted")


def reclaims(start: datetime, end: datetime, prices: dict[int, Decimal | None]) -> list[Reclaim]:
    """Every reclaim admitted in [start, end): the preempting ones (one query for the preemptions, one for
    the admissions after them), then the ones that preempted nobody (one query)."""
    # a closed window is read on the quotas in force at its end (quotas/history.py), so a past month's figures
    # do not move when today's quotas do
    snapshot = org_snapshot_as_of(end if end < timezone.now() else None)
    found, counted = _preempting(snapshot, start, end, prices)
    return found + _never_preempted(snapshot, start, end, prices, counted)


def _preempting(
    snapshot: OrgSnapshot, start: datetime, end: datetime, prices: dict[int, Decimal | None]
) -> tuple[list[Reclaim], set[int]]:
    preempted = list(
        Allocation.objects.filter(end__gte=start, end__lt=end, borrowed__gt=0, flavor__isnull=False)
        .filter(PREEMPTED)
        .values_list("flavor_id", "end", "unit_id", "unit__path")
    )
    if not preempted:
        return [], set()
    admitted = (
        Allocation.objects.filter(start__gte=start, start__lt=end, borrowed=0, unit__isnull=False)
        .filter(submitted_at__isnull=False, flavor_id__in={p[0] for p in preempted})
        .annotate(held=HELD)
        .values_list(
            "pk", "unit_id", "unit__path", "flavor_id", "flavor__cluster__name", "flavor__name", "submitted_at",
            "start", "held",
        )
    )  # fmt: skip
    out, counted = [], set()
    for pk, unit, path, flavor, cluster, name, submitted, begins, devices in admitted:
        if submitted is None:
            continue
        before = [p for p in preempted if p[0] == flavor and p[1] and submitted <= p[1] <= begins and p[2] != unit]
        if not before:
            continue
        contract = snapshot.effective_contract(unit)
        if contract is None:
            continue
        victim = before[-1]
        assert victim[1] is not None
        counted.add(pk)
        out.append(
            Reclaim(
                unit, path, victim[2], victim[3] or "", flavor, f"{cluster}/{name}", submitted, begins, victim[1],
                int(contract.reclaim_within_s), devices, prices.get(flavor), contract.name,
            )
        )  # fmt: skip
    return out, counted


def _never_preempted(
    snapshot: OrgSnapshot, start: datetime, end: datetime, prices: dict[int, Decimal | None], counted: set[int]
) -> list[Reclaim]:
    """Admissions inside the guarantee that waited while another unit borrowed on the flavor and no borrower
    was preempted for them: the largest borrower then is named."""
    at_ask = Q(start__lte=OuterRef("submitted_at")) & (Q(end__isnull=True) | Q(end__gt=OuterRef("submitted_at")))
    lent = (
        Allocation.objects.filter(at_ask, flavor_id=OuterRef("flavor_id"), borrowed__gt=0, unit__isnull=False)
        .exclude(unit_id=OuterRef("unit_id"))
        .order_by("-borrowed", "start")
    )
    own = (
        Allocation.objects.filter(at_ask, flavor_id=OuterRef("flavor_id"), unit_id=OuterRef("unit_id"))
        .values("unit_id")
        .annotate(n=Sum(HELD))
        .values("n")
    )
    rows = (
        Allocation.objects.filter(start__gte=start, start__lt=end, borrowed=0, unit__isnull=False)
        .filter(flavor__isnull=False, submitted_at__isnull=False, start__gt=F("submitted_at"))
        .exclude(pk__in=counted)
        .annotate(
            borrower=Subquery(lent.values("unit_id")[:1]),
            borrower_path=Subquery(lent.values("unit__path")[:1]),
            own_held=Coalesce(Subquery(own), 0.0),
            held=HELD,
        )
        .filter(borrower__isnull=False)
        .values_list(
            "unit_id", "unit__path", "flavor_id", "flavor__cluster__name", "flavor__name", "submitted_at", "start",
            "held", "borrower", "borrower_path", "own_held",
        )
    )  # fmt: skip
    out = []
    for unit, path, flavor, cluster, name, submitted, begins, devices, borrower, borrower_path, held in rows:
        key = f"{cluster}/{name}"
        if submitted is None or (begins - submitted).total_seconds() <= snapshot.scheduling_pass_s:
            continue  # admitted within a scheduling pass: it did not wait for anything
        if held + devices > snapshot.quota(unit, key, Resource.GPU).guarantee:
            continue  # its own work held the guarantee: it waited for itself, not for a reclaim
        contract = snapshot.effective_contract(unit)
        if contract is None:
            continue
        out.append(
            Reclaim(
                unit, path, borrower, borrower_path or "", flavor, key, submitted, begins, None,
                int(contract.reclaim_within_s), devices, prices.get(flavor), contract.name,
            )
        )  # fmt: skip
    return out
