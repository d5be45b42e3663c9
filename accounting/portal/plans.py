"""Portal parts of the governance plan: the what-if panel beside the quota form and the rebalance form
("what would last month have looked like with these numbers"), read-only and fed by the same
service as ``POST /api/v1/backtest/``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from accounting.charts import comparison_rows
from accounting.services.backtest_slots import BacktestBusy, backtest_turn
from accounting.services.plan import backtest_what_if, latest_month
from quotas.access import led_paths, may_read_costs
from quotas.errors import form_id
from quotas.models import OrgUnit
from quotas.policy.quantity import QuantityError, Resource, parse_quantity
from quotas.policy.snapshot import Quota
from quotas.selectors import flavor_keys, org_snapshot
from quotas.services.quota import QuotaChange, proposed_quota

FIELDS = ("guarantee", "burst", "lendable")


def _asked(unit: int, key: str, flavor: int, values: list[int | None], snapshot: Any) -> Quota:
    """The quota the form asks for: its values where given, today's elsewhere (the edit path's rule)."""
    return proposed_quota(QuotaChange(unit, flavor, Resource.GPU, *values), snapshot.quota(unit, key, Resource.GPU))


def _number(raw: object) -> int | None:
    try:
        return parse_quantity(Resource.GPU, str(raw).strip())
    except QuantityError:
        return None  # the form's own check names the field and the fix


def _proposed(unit: OrgUnit, data: Any) -> tuple[str, dict[tuple[int, str], Quota]]:
    """The GPU quotas the form proposes and the subtree they are replayed in: the quota form names
    ``<field>-<flavor id>-gpu`` of one unit (replayed among its siblings); the rebalance form names
    ``<field>-<child id>`` of one flavor (replayed among those children)."""
    snapshot = org_snapshot()
    keys = flavor_keys()
    changes: dict[tuple[int, str], Quota] = {}
    if data.get("flavor") and data.get("resource"):
        if data.get("resource") != Resource.GPU.value:
            return unit.path, {}
        fid = form_id(data["flavor"])  # "²".isdigit() is true: int() then failed with a 500
        key = keys.get(fid)
        for child in snapshot.children.get(unit.pk, ()) if key else ():
            assert key is not None
            proposed = _asked(child, key, fid, [_number(data.get(f"{f}-{child}")) for f in FIELDS], snapshot)
            if proposed != snapshot.quota(child, key, Resource.GPU):
                changes[(child, key)] = proposed
        return unit.path, changes
    for fid, key in keys.items():
        sent = [data.get(f"{f}-{fid}-gpu") for f in FIELDS]
        if all(v is None for v in sent):
            continue
        proposed = _asked(unit.pk, key, fid, [_number(v) for v in sent], snapshot)
        if proposed != snapshot.quota(unit.pk, key, Resource.GPU):
            changes[(unit.pk, key)] = proposed
    scope = unit.parent.path if unit.parent_id and unit.parent else unit.path
    return scope, changes


@login_required
@require_POST
def quota_what_if(request: HttpRequest, unit_id: int) -> HttpResponse:
    """The what-if panel (an htmx partial): last month replayed with the form's numbers beside the
    month as it ran — per unit whose usage the reader may read, and in total when they may read the
    whole subtree. Hourly steps, so it answers while the lead types."""
    unit = get_object_or_404(OrgUnit, pk=unit_id, archived_at__isnull=True)
    scope_path, changes = _proposed(unit, request.POST)
    scope = OrgUnit.objects.filter(path=scope_path).first() or unit
    month = latest_month(scope.path)
    context: dict[str, Any] = {"month": month, "changes": changes, "answer": None, "rows": []}
    if month and changes:
        try:
            with backtest_turn(request.user.pk):
                answer = backtest_what_if(scope, month, changes, minutes=False)
        except BacktestBusy as busy:
            context.update(busy=str(busy), unit=unit)  # htmx swaps only 2xx: said in the panel, and retried
            return render(request, "accounting/_whatif.html", context)
        led = led_paths(request.user)  # once, not a query per row
        readable = [r for r in answer["units"] if may_read_costs(request.user, r["unit_path"], led)]
        whole = may_read_costs(request.user, scope.path, led)
        context.update(
            answer=answer,
            rows=comparison_rows(readable if whole else [r for r in readable if r["changed"]]),
            totals=answer["totals"] if whole else None,
            scope=scope,
        )
    return render(request, "accounting/_whatif.html", context)
