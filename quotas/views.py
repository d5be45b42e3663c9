"""Server-rendered pages. The full portal (editing, approvals) builds on these in its own issue."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from quotas import selectors
from quotas.policy.capacity import capacity_report, effective_ceilings
from quotas.policy.invariants import validate_tree
from quotas.policy.quantity import Resource


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The tree with each unit's GPU guarantee and ceiling per flavor, and capacity per flavor."""
    snapshot = selectors.org_snapshot()
    flavors = sorted(snapshot.flavors)
    ceilings = effective_ceilings(snapshot)
    rows = []
    for uid in _depth_first(snapshot):
        unit = snapshot.units[uid]
        cells = [
            (snapshot.quota(uid, f, Resource.GPU).guarantee, ceilings.get((uid, f, Resource.GPU), 0)) for f in flavors
        ]
        rows.append({"unit": unit, "indent": unit.path.count("/"), "cells": cells})
    return render(
        request,
        "quotas/home.html",
        {
            "flavors": flavors,
            "rows": rows,
            "capacity": capacity_report(snapshot),
            "violations": validate_tree(snapshot),
            "revision": selectors.policy_revision(),
        },
    )


def _depth_first(snapshot: selectors.snap.OrgSnapshot) -> list[int]:
    order: list[int] = []
    pending = list(reversed(snapshot.roots()))
    while pending:
        uid = pending.pop()
        order.append(uid)
        pending.extend(sorted(snapshot.children.get(uid, ()), key=lambda c: snapshot.units[c].slug, reverse=True))
    return order
