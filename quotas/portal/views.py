"""Read pages of the portal: the tree, a unit, its history, capacity, change requests."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from quotas import selectors, services
from quotas.access import (
    NotAllowedError,
    led_paths,
    may_decide,
    may_read_request,
    may_request,
    may_set_directly,
    readable_audit,
    readable_requests,
    request_units,
    waiting_for,
)
from quotas.errors import InputError
from quotas.models import (
    AuditEvent,
    ChangeRequest,
    ChangeRequestStatus,
    Cluster,
    ClusterKind,
    Membership,
    OrgUnit,
    Quota,
    ResourceFlavor,
)
from quotas.policy.capacity import capacity_report, effective_ceilings
from quotas.policy.durations import format_duration
from quotas.policy.invariants import validate_tree
from quotas.policy.quantity import Resource, format_quantity
from quotas.portal.charts import bar_rows, quota_bars, stacked_capacity
from quotas.portal.decide import decision_context
from quotas.portal.panels import home_panels, unit_panels
from quotas.previews import kueue_reach
from quotas.services.change_requests import request_lines, request_violations
from quotas.services.enforce import POLICY_ACTIONS, enforced_by


@login_required
def tree(request: HttpRequest) -> HttpResponse:
    """The organisation as a collapsible tree, each unit with its GPU guarantee / ceiling per flavor."""
    snapshot = selectors.org_snapshot()
    flavors = sorted(snapshot.flavors)
    ceilings = effective_ceilings(snapshot)
    allocated = selectors.allocations()

    def node(uid: int) -> dict[str, Any]:
        unit = snapshot.units[uid]
        cells = [
            (
                f,
                snapshot.quota(uid, f, Resource.GPU).guarantee,
                ceilings.get((uid, f, Resource.GPU), 0),
                allocated.get((uid, f, Resource.GPU.value)),
            )
            for f in flavors
        ]
        children = sorted(snapshot.children.get(uid, ()), key=lambda c: snapshot.units[c].slug)
        return {"unit": unit, "cells": [c for c in cells if c[2]], "children": [node(c) for c in children]}

    return render(
        request,
        "quotas/home.html",
        {
            "roots": [node(r) for r in snapshot.roots()],
            "capacity": capacity_report(snapshot),
            "violations": validate_tree(snapshot),
            "revision": selectors.policy_revision(),
            "led": _led_units(request),
            **home_panels(request, led_paths(request.user)),
        },
    )


def _led_units(request: HttpRequest) -> list[OrgUnit]:
    return list(OrgUnit.objects.filter(leads=request.user.pk, archived_at__isnull=True).order_by("path"))


@login_required
def start(request: HttpRequest) -> HttpResponse:
    """Where signing in lands: a lead of one unit on that unit, a lead of several on the organisation
    page's list of them, everyone else on the organisation page."""
    led = _led_units(request)
    if len(led) == 1:
        return redirect("quotas:unit", unit_id=led[0].pk)
    return redirect(reverse("quotas:home") + ("#yours" if led else ""))


def _administer(request: HttpRequest, unit: OrgUnit) -> dict[str, Any]:
    """A platform admin's forms on the unit page (quotas/portal/admin.py handles them)."""
    from quotas.access import is_platform_admin
    from quotas.portal.admin import NEXT_KIND

    if not is_platform_admin(request.user):
        return {}
    return {
        "administer": True,
        "child_kind": NEXT_KIND.get(unit.kind, "project"),
        "members": list(unit.memberships.select_related("user", "slurm_cluster").order_by("slurm_username")),
        "slurm_clusters": list(Cluster.objects.filter(kind=ClusterKind.SLURM).order_by("name")),
        "bindings": list(unit.namespaces.select_related("cluster")),
        "kube_clusters": list(Cluster.objects.filter(kind=ClusterKind.KUBERNETES).order_by("name")),
        "lead_names": ", ".join(sorted(u.username for u in unit.leads.all())),
    }


def _unit_or_404(unit_id: int) -> OrgUnit:
    return get_object_or_404(OrgUnit.objects.select_related("parent", "contract"), pk=unit_id, archived_at__isnull=True)


@login_required
def unit_detail(request: HttpRequest, unit_id: int) -> HttpResponse:
    unit = _unit_or_404(unit_id)
    quotas = list(
        Quota.objects.filter(unit=unit)
        .select_related("flavor__cluster")
        .order_by("flavor__cluster__name", "flavor__name", "resource")
    )
    snapshot = selectors.org_snapshot()
    contract = snapshot.effective_contract(unit.pk)
    durations = {}
    if contract:
        durations = {
            f: format_duration(getattr(contract, f"{f}_s"))
            for f in ("reclaim_within", "grace_period", "min_run_window")
        }
        durations["checkpoint_every"] = (
            format_duration(contract.checkpoint_every_s) if contract.checkpoint_every_s else ""
        )
    allocated = selectors.allocations()
    reach = kueue_reach(unit.pk)
    chart_rows = [
        (q.flavor.key, q.guarantee, q.guarantee + q.burst, allocated.get((unit.pk, q.flavor.key, q.resource)))
        for q in quotas
        if q.resource == "nvidia.com/gpu"
    ]
    bars, height = quota_bars(chart_rows)
    children = list(unit.children.filter(archived_at__isnull=True).order_by("slug"))
    return render(
        request,
        "quotas/unit.html",
        {
            **unit_panels(request, unit, {"quotas": quotas, "chart_rows": chart_rows}),
            "unit": unit,
            "rows": [_row(q, allocated.get((unit.pk, q.flavor.key, q.resource)), reach) for q in quotas],
            "contract": contract,
            "durations": durations,
            "children": children,
            "inside": _inside(snapshot, children),
            "tiers": _tiers(unit),
            "namespaces": unit.namespaces.select_related("cluster").order_by("cluster__name"),
            "members": Membership.objects.filter(unit=unit).select_related("user"),
            "leads": unit.leads.all(),
            "events": readable_audit(
                request.user, AuditEvent.objects.filter(selectors.subtree("unit_path", unit.path))
            )[:10],
            "bars": bars,
            "bar_rows": bar_rows(bars),
            "chart_height": height,
            "may_edit": may_request(request.user, unit),
            "edits_directly": may_set_directly(request.user, unit),
            # its units' quotas are the lead's (or above) to set: all of them on one form
            "may_rebalance": may_request(request.user, unit) and bool(children),
            **_administer(request, unit),
            "requests": readable_requests(request.user).filter(unit=unit, status=ChangeRequestStatus.PENDING),
        },
    )


def _inside(snapshot: Any, children: list[OrgUnit]) -> list[dict[str, Any]]:
    """Each unit inside with its GPUs per flavor (guarantee, ceiling): the lead's everyday task, on top."""
    gpus: dict[int, list[tuple[str, int, int]]] = {c.pk: [] for c in children}
    for (uid, key, resource), q in snapshot.quotas.items():
        if uid in gpus and resource is Resource.GPU:
            gpus[uid].append((key, q.guarantee, q.guarantee + q.burst))
    return [{"unit": c, "gpus": sorted(gpus[c.pk])} for c in children]


def _row(q: Quota, allocated: int | None, reach: dict[str, int]) -> dict[str, Any]:
    resource = Resource(q.resource)
    largest = reach.get(q.flavor.key) if resource is Resource.GPU else None
    spec = q.flavor.sharing_spec if resource is Resource.GPU else None
    slices = None
    if spec is not None and spec.shared:  # GPU-equivalents: what they hold in slices, too
        slices = {"guarantee": spec.slices(q.guarantee), "ceiling": spec.slices(q.guarantee + q.burst)}
    return {
        "slices": slices,
        "largest": "—" if largest is None else format_quantity(resource, largest),
        "allocated": "—" if allocated is None else format_quantity(resource, allocated),
        "flavor": q.flavor.key,
        "resource": "GPU-equivalents" if slices else q.resource,
        "guarantee": format_quantity(resource, q.guarantee),
        "burst": format_quantity(resource, q.burst),
        "lendable": format_quantity(resource, q.lendable),
        "ceiling": format_quantity(resource, q.guarantee + q.burst),
    }


def _tiers(unit: OrgUnit) -> list[str]:
    node: OrgUnit | None = unit
    while node is not None:
        names = sorted(node.allowed_tiers.values_list("name", flat=True))
        if names:
            return names
        node = node.parent
    from quotas.models import WorkloadTier

    return sorted(WorkloadTier.objects.values_list("name", flat=True))


@login_required
def unit_history(request: HttpRequest, unit_id: int) -> HttpResponse:
    unit = _unit_or_404(unit_id)
    events = list(
        readable_audit(request.user, AuditEvent.objects.filter(selectors.subtree("unit_path", unit.path)))[:200]
    )
    runs = enforced_by(events)
    rows = [{**_diff(e), "runs": runs.get(e.pk), "policy": e.action in POLICY_ACTIONS} for e in events]
    return render(request, "quotas/history.html", {"unit": unit, "events": rows})


QUANTITY_FIELDS = ("guarantee", "burst", "lendable")
UNIT_WORDS = {Resource.GPU: " GPUs", Resource.CPU: " cores", Resource.MEMORY: ""}


def _diff(event: AuditEvent) -> dict[str, Any]:
    """Before → after of what an event changed, quantities as people write them ("48 GPUs", "500m
    cores", "512Gi"), without the version counter."""
    before, after = event.before or {}, event.after or {}
    resource = None
    if event.action == "quota_set":
        try:
            resource = Resource(event.object_repr.rsplit(" ", 1)[-1])
        except ValueError:
            resource = None

    def shown(key: str, value: Any) -> Any:
        if resource is not None and key in QUANTITY_FIELDS and isinstance(value, int):
            return f"{format_quantity(resource, value)}{UNIT_WORDS[resource]}"
        return value

    keys = sorted((set(before) | set(after)) - {"version"})
    return {
        "event": event,
        "changes": [
            (k, shown(k, before.get(k, "—")), shown(k, after.get(k, "—")))
            for k in keys
            if before.get(k) != after.get(k)
        ],
    }


@login_required
def capacity(request: HttpRequest) -> HttpResponse:
    """Per flavor: physical, reserved, headroom, promised by each department, left to promise."""
    snapshot = selectors.org_snapshot()
    lines = capacity_report(snapshot)
    departments = [
        (uid, snapshot.units[uid].slug) for root in snapshot.roots() for uid in snapshot.children.get(root, ())
    ]
    rows = []
    for line in lines:
        parts = [(name, snapshot.quota(uid, line.flavor, Resource.GPU).guarantee) for uid, name in departments]
        promised_by_departments = sum(g for _, g in parts)
        parts.append(("organisation (unassigned)", max(0, line.promised - promised_by_departments)))
        rows.append((line.flavor, line.physical, [p for p in parts if p[1]], line.reserved, line.headroom))
    bars, legend, height = stacked_capacity(rows)
    models = {f.key: f.accelerator_model for f in ResourceFlavor.objects.select_related("cluster")}
    return render(
        request,
        "quotas/capacity.html",
        {
            "lines": [(line, models.get(line.flavor, "")) for line in lines],
            "bars": bars,
            "bar_rows": bar_rows(bars),
            "legend": legend,
            "chart_height": height,
        },
    )


@login_required
def requests_list(request: HttpRequest) -> HttpResponse:
    mine = ChangeRequest.objects.filter(requested_by_id=request.user.pk).select_related("unit")[:50]
    return render(request, "quotas/requests.html", {"mine": mine, "to_decide": waiting_for(request.user)})


@login_required
def request_detail(request: HttpRequest, request_id: int) -> HttpResponse:
    change_request = get_object_or_404(
        ChangeRequest.objects.select_related("unit", "requested_by", "decided_by"), pk=request_id
    )
    if not may_read_request(request.user, change_request):
        raise PermissionDenied(
            f"change requests on {change_request.unit.path} are for whoever asked, the leads of the units they "
            "change and above, and platform admins"
        )
    can_decide = may_decide(request.user, change_request) and change_request.status == "pending"
    # four eyes: who asked may withdraw (reject) but not approve; the button is not offered
    own = settings.ALLOT_REQUESTS_SECOND_PERSON and change_request.requested_by_id == request.user.pk
    if request.method == "POST" and can_decide:
        decision, comment = request.POST.get("decision"), request.POST.get("comment", "")
        if decision not in ("approve", "reject"):  # never read a missing or odd decision as a rejection
            messages.error(request, "Say whether you approve or reject the request: nothing was decided.")
            return redirect("quotas:request", request_id=change_request.pk)
        try:
            if decision == "approve":
                change_request = services.change_request_approve(
                    actor=request.user, request=change_request, comment=comment
                )
            else:
                change_request = services.change_request_reject(
                    actor=request.user, request=change_request, comment=comment
                )
        except (InputError, NotAllowedError) as exc:
            messages.error(request, str(exc))
            return redirect("quotas:request", request_id=change_request.pk)
        if change_request.status == ChangeRequestStatus.STALE:  # refused, nothing applied: never a green banner
            detail = (change_request.outcome or {}).get("detail", "")
            messages.error(request, f"Request #{change_request.pk} was refused as stale, nothing applied: {detail}")
        else:
            messages.success(request, f"Request #{change_request.pk}: {change_request.get_status_display()}.")
        return redirect("quotas:request", request_id=change_request.pk)
    pending = change_request.status == ChangeRequestStatus.PENDING
    return render(
        request,
        "quotas/request.html",
        {
            "cr": change_request,
            "can_decide": can_decide,
            "own": own,
            "lines": request_lines(change_request),
            "violations": request_violations(change_request) if pending else [],
            "pending": pending,
            "units": request_units(change_request),
            **(decision_context(request, change_request) if pending else {}),
        },
    )
