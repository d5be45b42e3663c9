"""The reclaims of a window: runs inside their unit's guarantee that waited to start while a borrower on
the same flavor was preempted — read by the contract finding, the fairness report and the review
(a read of its own, so the selectors and the findings service need not import each other)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import Q

from accounting.models import Allocation
from accounting.policy.hold_findings import Reclaim
from quotas.selectors import org_snapshot


def reclaims(start: datetime, end: datetime, prices: dict[int, Decimal | None]) -> list[Reclaim]:
    """Runs inside their unit's guarantee that waited to start while a borrower on the same flavor was
    preempted: from the preemptions of the window (one query) and the admissions after them (one)."""
    preempted = list(
        Allocation.objects.filter(end__gte=start, end__lt=end, borrowed__gt=0, flavor__isnull=False)
        .filter(Q(raw_state__startswith="PREEMPTED") | Q(raw_state__startswith="evicted Preempted"))
        .values_list("flavor_id", "end", "unit_id", "unit__path")
    )
    if not preempted:
        return []
    snapshot = org_snapshot()
    admitted = (
        Allocation.objects.filter(start__gte=start, start__lt=end, borrowed=0, unit__isnull=False)
        .filter(submitted_at__isnull=False, flavor_id__in={p[0] for p in preempted})
        .values_list(
            "unit_id", "unit__path", "flavor_id", "flavor__cluster__name", "flavor__name", "submitted_at", "start",
            "devices",
        )
    )  # fmt: skip
    out = []
    for unit, path, flavor, cluster, name, submitted, begins, devices in admitted:
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
        out.append(
            Reclaim(
                unit, path, victim[2], victim[3] or "", flavor, f"{cluster}/{name}", submitted, begins, victim[1],
                int(contract.reclaim_within_s), devices, prices.get(flavor),
            )
        )  # fmt: skip
    return out
