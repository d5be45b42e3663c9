"""Rebalancing a parent's guarantee among its children in one step: every child's quota of one flavor
and resource on one form, saved together with one reason (``quota_edit``: one transaction, one check
of the whole set, so the order of the rows does not matter — moving 8 GPUs from nlp to vision needs
no "lower nlp first"). A hint to lower something first appears only where that is the real fix: a
child lowered below what its own children hold must have them lowered first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from quotas import services
from quotas.access import NotAllowedError, may_set_directly
from quotas.errors import InputError, StaleVersionError
from quotas.models import OrgUnit, Quota, ResourceFlavor
from quotas.policy.quantity import QuantityError, Resource, format_quantity, parse_quantity, parse_resource
from quotas.policy.violations import PolicyViolationError, Violation, ViolationCode
from quotas.portal.edit import VERSION_MISSING, form_version, read_fields, version_errors
from quotas.services.quota import QuotaChange

FIELDS = ("guarantee", "burst", "lendable")


@dataclass
class ChildRow:
    unit: OrgUnit
    current: Quota | None
    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    version: int = 0

    def name(self, what: str) -> str:
        return f"{what}-{self.unit.pk}"


def _setup(
    request: HttpRequest, unit_id: int
) -> tuple[OrgUnit, ResourceFlavor, Resource, Quota | None, list[ChildRow]]:
    parent = get_object_or_404(OrgUnit, pk=unit_id, archived_at__isnull=True)
    children = list(parent.children.filter(archived_at__isnull=True).order_by("slug"))
    if not children:
        raise PermissionDenied(f"{parent.path} has no units inside it to rebalance")
    if not all(may_set_directly(request.user, c) for c in children):
        raise PermissionDenied(f"only a lead of {parent.path} (or above) or a platform admin may rebalance its units")
    own = Quota.objects.filter(unit=parent).select_related("flavor__cluster").order_by("flavor__name", "resource")
    source = request.POST if request.method == "POST" else request.GET
    try:
        resource = parse_resource(source.get("resource") or "gpu")
    except QuantityError:
        resource = Resource.GPU
    flavor_id = source.get("flavor")
    flavors = [q.flavor for q in own if q.resource == resource.value]
    flavor = next((f for f in flavors if str(f.pk) == flavor_id), flavors[0] if flavors else None)
    if flavor is None:
        raise PermissionDenied(f"{parent.path} holds no {resource.value} quota to share")
    parent_quota = next((q for q in own if q.flavor_id == flavor.pk and q.resource == resource.value), None)
    current = {q.unit_id: q for q in Quota.objects.filter(unit__in=children, flavor=flavor, resource=resource.value)}
    rows = []
    for child in children:
        q = current.get(child.pk)
        values = {f: format_quantity(resource, getattr(q, f) if q else 0) for f in FIELDS}
        rows.append(ChildRow(child, q, values, version=q.version if q else 0))
    return parent, flavor, resource, parent_quota, rows


def _read(rows: list[ChildRow], flavor: ResourceFlavor, resource: Resource, data: Any) -> list[QuotaChange]:
    changes = []
    for row in rows:
        parsed = read_fields(resource, row.values, row.errors, data, row.name)
        raw = data.get(row.name("version"))
        version = form_version(raw)
        if row.errors:
            continue
        values = (parsed["guarantee"], parsed["burst"], parsed["lendable"])
        now = tuple(getattr(row.current, f) for f in FIELDS) if row.current else (0, 0, 0)
        if values != now or (raw is not None and version is None):
            if version is None:  # never "the current version": that would overwrite a change made meanwhile
                row.errors["version"] = VERSION_MISSING
                continue
            row.version = version
            changes.append(QuotaChange(row.unit.pk, flavor.pk, resource, *values, expected_version=row.version))
    return changes


def _place(rows: list[ChildRow], violations: list[Violation]) -> list[Violation]:
    """Each violation about a child next to its field, its hint made specific where lowering something
    first is the real fix (the child's own units hold more than its new guarantee); the rest (about
    the parent) returned."""
    rest = []
    by_path = {row.unit.path: row for row in rows}
    for v in violations:
        row = by_path.get(v.unit or "")
        if row is None or v.field not in FIELDS:
            rest.append(v)
            continue
        hint = v.hint
        if v.code == ViolationCode.CHILDREN_EXCEED_GUARANTEE:
            inner = ", ".join(
                f"{q.unit.slug} {format_quantity(Resource(q.resource), q.guarantee)}"
                for q in Quota.objects.filter(
                    unit__parent=row.unit, unit__archived_at=None, flavor__cluster__name=(v.flavor or "").split("/")[0],
                    flavor__name=(v.flavor or "").split("/")[-1], resource=v.resource, guarantee__gt=0,
                ).select_related("unit")
            )  # fmt: skip
            hint = f"lower {row.unit.slug}'s own units first ({inner}): they hold more than its new guarantee"
        row.errors.setdefault(v.field, f"{v.message}. {hint}")
    return rest


def _totals(parent_quota: Quota | None, rows: list[ChildRow], resource: Resource) -> dict[str, Any]:
    try:
        asked = sum(parse_quantity(resource, r.values["guarantee"]) for r in rows)
    except QuantityError:
        asked = None
    now = sum(r.current.guarantee for r in rows if r.current)
    limit = parent_quota.guarantee if parent_quota else 0
    return {
        "now": format_quantity(resource, now),
        "asked": None if asked is None else format_quantity(resource, asked),
        "limit": format_quantity(resource, limit),
        "room": None if asked is None else format_quantity(resource, max(0, limit - asked)),
        "over": None if asked is None or asked <= limit else format_quantity(resource, asked - limit),
    }


@login_required
def rebalance(request: HttpRequest, unit_id: int) -> HttpResponse:
    parent, flavor, resource, parent_quota, rows = _setup(request, unit_id)
    options = Quota.objects.filter(unit=parent).select_related("flavor__cluster").order_by("flavor__name", "resource")
    context: dict[str, Any] = {
        "unit": parent,
        "flavor": flavor,
        "resource": resource,
        "rows": rows,
        "options": [(q.flavor, Resource(q.resource)) for q in options],
        "reason": request.POST.get("reason", ""),
    }
    if request.method != "POST":
        return render(request, "quotas/rebalance.html", {**context, "totals": _totals(parent_quota, rows, resource)})
    changes = _read(rows, flavor, resource, request.POST)
    check_only = request.POST.get("check") == "1" or getattr(request, "htmx", False)
    status = 200
    if not any(r.errors for r in rows) and changes:
        try:
            if check_only:
                from quotas.previews import quota_change_preview

                context["violations"] = _place(rows, list(quota_change_preview(changes).violations))
            else:
                services.quota_edit(actor=request.user, reason=request.POST.get("reason", ""), changes=changes)
                moved = len(changes)
                messages.success(request, f"Rebalanced {moved} unit(s) of {parent.path} on {flavor.key} in one change.")
                return redirect("quotas:unit", unit_id=parent.pk)
        except PolicyViolationError as exc:
            context["violations"], status = _place(rows, list(exc.violations)), 400
        except StaleVersionError as exc:
            context["stale"], status = f"Someone changed one of these quotas meanwhile ({exc}); nothing was saved.", 409
        except InputError as exc:
            context["form_errors"], status = {k: " ".join(v) for k, v in exc.errors.items()}, 400
        except NotAllowedError as exc:
            raise PermissionDenied(str(exc)) from exc
    elif not changes and not any(r.errors for r in rows) and not check_only:
        messages.info(request, "Nothing changed: no quota was saved.")
        return redirect("quotas:unit", unit_id=parent.pk)
    elif any(r.errors for r in rows) and not check_only:
        status = 400
        context["form_errors"] = version_errors(rows)
    context["totals"] = _totals(parent_quota, rows, resource)
    template = "quotas/_rebalance_check.html" if check_only else "quotas/rebalance.html"
    return render(request, template, context, status=status)
