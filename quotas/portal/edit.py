"""Editing a unit's quotas: one form, live validation while typing, a preview of every cluster object
that would change, then a direct save (inside your envelope) or a change request (above it).

The form speaks the same language as the API: quantities in Kubernetes syntax, the version each
row was read at (a stale form is refused and shows the new values), and a reason for the audit trail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from quotas import services
from quotas.access import NotAllowedError, may_request, may_set_directly
from quotas.errors import InputError, StaleVersionError
from quotas.models import OrgUnit, Quota, ResourceFlavor
from quotas.policy.quantity import QuantityError, Resource, format_quantity, parse_quantity
from quotas.policy.violations import PolicyViolationError, Violation, ViolationCode
from quotas.previews import quota_change_preview
from quotas.services.envelope import EnvelopeOffer, envelope_offer
from quotas.services.quota import QuotaChange

SLUGS = {Resource.GPU: "gpu", Resource.CPU: "cpu", Resource.MEMORY: "memory"}
FIELDS = ("guarantee", "burst", "lendable")


@dataclass
class Row:
    flavor: ResourceFlavor
    resource: Resource
    current: Quota | None
    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    version: int = 0

    @property
    def prefix(self) -> str:
        return f"{self.flavor.pk}-{SLUGS[self.resource]}"

    def field_name(self, name: str) -> str:
        return f"{name}-{self.prefix}"


def _rows(unit: OrgUnit) -> list[Row]:
    """Every quota the unit has, plus every flavor/resource its parent has (so it can get one)."""
    own = {(q.flavor_id, q.resource): q for q in Quota.objects.filter(unit=unit).select_related("flavor__cluster")}
    keys = set(own)
    if unit.parent_id:
        keys |= set(Quota.objects.filter(unit_id=unit.parent_id).values_list("flavor_id", "resource"))
    else:
        keys |= {(f, Resource.GPU.value) for f in ResourceFlavor.objects.values_list("pk", flat=True)}
    flavors = {f.pk: f for f in ResourceFlavor.objects.select_related("cluster").filter(pk__in={k[0] for k in keys})}
    rows = []
    for flavor_id, resource in sorted(keys, key=lambda k: (flavors[k[0]].key, k[1])):
        current = own.get((flavor_id, resource))
        r = Resource(resource)
        rows.append(
            Row(
                flavors[flavor_id],
                r,
                current,
                {f: format_quantity(r, getattr(current, f)) if current else "0" for f in FIELDS},
                version=current.version if current else 0,
            )
        )
    return rows


def read_fields(
    resource: Resource, values: dict[str, str], errors: dict[str, str], data: Any, field_name: Callable[[str], str]
) -> dict[str, int]:
    """Each of guarantee, burst and lendable as posted in ``data`` under ``field_name(name)`` (kept in
    ``values`` to show again), parsed; a value that is not a quantity goes to ``errors`` with its
    hint. Unposted fields keep ``values``."""
    parsed: dict[str, int] = {}
    for name in FIELDS:
        sent = data.get(field_name(name))
        raw = str(values[name] if sent is None else sent).strip()
        values[name] = raw
        try:
            parsed[name] = parse_quantity(resource, raw)
        except QuantityError as exc:
            errors[name] = f"{exc.message}: {exc.hint}"
    return parsed


VERSION_MISSING = (
    "this form does not say which version of the quota it was filled in from, so saving it could overwrite "
    "someone else's change: reload the page and make your change again"
)


def form_version(raw: object) -> int | None:
    """A version field as the form sent it: ASCII digits only (``"²".isdigit()`` is true); None when
    missing or not a number — never the current version, which would hide a lost update."""
    text = str(raw).strip() if raw is not None else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None


def _read(unit: OrgUnit, rows: list[Row], data: Any) -> list[QuotaChange]:
    """Fill rows from the posted form; return the changes (rows whose values differ). A change
    without a valid version of the quota it was made on is refused (``errors["version"]``)."""
    changes = []
    for row in rows:
        parsed = read_fields(row.resource, row.values, row.errors, data, row.field_name)
        raw = data.get(f"version-{row.prefix}")
        version = form_version(raw)
        current = row.current
        if row.errors:
            continue
        values = (parsed["guarantee"], parsed["burst"], parsed["lendable"])
        unchanged = current is not None and (current.guarantee, current.burst, current.lendable) == values
        if not unchanged and (current is not None or any(values)):
            if version is None:
                row.errors["version"] = VERSION_MISSING
                continue
            row.version = version
            changes.append(QuotaChange(unit.pk, row.flavor.pk, row.resource, *values, row.version))
        elif raw is not None and version is None:
            row.errors["version"] = VERSION_MISSING
    return changes


def version_errors(rows: Any) -> dict[str, str]:
    """The form-level error when a row's version was missing or not a number."""
    return {"version": VERSION_MISSING} if any("version" in r.errors for r in rows) else {}


def _changed(row: Row) -> set[str]:
    """The fields of ``row`` the person changed (a new quota: every non-zero one)."""
    found = set()
    for name in FIELDS:
        try:
            value = parse_quantity(row.resource, row.values[name])
        except QuantityError:
            continue
        if value != (getattr(row.current, name) if row.current else 0):
            found.add(name)
    return found


def _mark(unit: OrgUnit, rows: list[Row], violations: list[Violation]) -> list[Violation]:
    """Put each violation next to the field that caused it and return those that are not about this
    unit's own fields (they are listed above the form's buttons as well). A ceiling above the parent's
    goes to the guarantee when that is what was raised (the check names burst, the part to lower); a
    parent whose children now exceed it is this row's guarantee's doing when that was raised."""
    rest = []
    parent = unit.parent.path if unit.parent_id and unit.parent else None
    for v in violations:
        row = next(
            (
                r
                for r in rows
                if v.flavor == r.flavor.key and v.resource == r.resource.value and v.unit in (unit.path, parent)
            ),
            None,
        )
        changed = _changed(row) if row is not None else set()
        field = v.field
        if (
            row is not None
            and v.unit == unit.path
            and field == "burst"
            and "burst" not in changed
            and "guarantee" in changed
        ):
            field = "guarantee"
        if row is not None and v.unit == unit.path and field in FIELDS:
            row.errors.setdefault(field, f"{v.message}. {v.hint}")
            continue
        if (
            row is not None
            and v.unit == parent
            and v.code == ViolationCode.CHILDREN_EXCEED_GUARANTEE
            and "guarantee" in changed
        ):
            row.errors.setdefault("guarantee", f"{v.message}. {v.hint}")
        rest.append(v)
    return rest


WORDS = {Resource.GPU: "GPUs", Resource.CPU: "cores of CPU", Resource.MEMORY: "of memory"}


def sentences(unit: OrgUnit, change: QuotaChange, current: Quota | None, flavor: ResourceFlavor) -> list[str]:
    """A change as people say it: "llm-pretrain is guaranteed 52 A100-80GB GPUs, was 48"."""
    r = change.resource
    word = f"{flavor.accelerator_model} GPUs" if r is Resource.GPU else f"{WORDS[r]} on {flavor.key}"

    def q(value: int) -> str:
        return format_quantity(r, value)

    old = {f: getattr(current, f) if current else 0 for f in FIELDS}
    new = {f: old[f] if getattr(change, f) is None else getattr(change, f) for f in FIELDS}
    said = []
    if new["guarantee"] != old["guarantee"]:
        said.append(f"{unit.slug} is guaranteed {q(new['guarantee'])} {word}, was {q(old['guarantee'])}")
    if new["guarantee"] + new["burst"] != old["guarantee"] + old["burst"]:
        said.append(
            f"{unit.slug} may hold up to {q(new['guarantee'] + new['burst'])} {word} when it borrows, "
            f"was {q(old['guarantee'] + old['burst'])}"
        )
    if new["lendable"] != old["lendable"]:
        said.append(f"{unit.slug} lends up to {q(new['lendable'])} {word} while idle, was {q(old['lendable'])}")
    return said


@dataclass
class FlavorGroup:
    """A flavor's rows on the form: its GPUs first, CPU and memory folded under it."""

    flavor: ResourceFlavor
    gpu: Row | None
    others: list[Row]

    @property
    def others_open(self) -> bool:
        return any(r.errors for r in self.others)


def _context(request: HttpRequest, unit: OrgUnit, rows: list[Row], **extra: Any) -> dict[str, Any]:
    by_key = {(row.flavor.pk, row.resource): row for row in rows}
    readable = [
        sentence
        for c in extra.get("changes") or ()
        if (c.flavor_id, c.resource) in by_key
        for sentence in sentences(
            unit, c, by_key[(c.flavor_id, c.resource)].current, by_key[(c.flavor_id, c.resource)].flavor
        )
    ]
    groups: dict[int, FlavorGroup] = {}
    for row in rows:
        group = groups.setdefault(row.flavor.pk, FlavorGroup(row.flavor, None, []))
        if row.resource is Resource.GPU:
            group.gpu = row
        else:
            group.others.append(row)
    return {
        "unit": unit,
        "rows": rows,
        "groups": list(groups.values()),
        "direct": may_set_directly(request.user, unit),
        "reason": request.POST.get("reason", ""),
        "readable_changes": readable,
        **extra,
    }


def _editable(request: HttpRequest, unit_id: int) -> OrgUnit:
    unit = get_object_or_404(OrgUnit, pk=unit_id, archived_at__isnull=True)
    if not may_request(request.user, unit):
        raise PermissionDenied(f"only the leads of {unit.path} or of a unit above it may edit its quotas")
    return unit


@login_required
def quota_check(request: HttpRequest, unit_id: int) -> HttpResponse:
    """htmx, while typing: field errors and violations with the numbers, and what would change."""
    unit = _editable(request, unit_id)
    rows = _rows(unit)
    changes = _read(unit, rows, request.POST)
    preview = quota_change_preview(changes) if changes and not any(r.errors for r in rows) else None
    others = _mark(unit, rows, list(preview.violations)) if preview else []
    offer = _offer(request, unit, changes) if preview and preview.violations else None
    return render(
        request,
        "quotas/_check.html",
        _context(request, unit, rows, changes=changes, preview=preview, violations=others, offer=offer),
    )


def _prefilled(request: HttpRequest, unit: OrgUnit, rows: list[Row]) -> dict[str, Any]:
    """The form as linked from elsewhere (a waiting job's way out): fields named in the query string
    (``burst-<flavor>-gpu=6``, ``reason=…``) filled in on the current versions, with their check and
    preview shown at once, as if typed. Nothing is saved until the person saves; no query, the plain form."""
    names = {row.field_name(name) for row in rows for name in FIELDS}
    if not names & set(request.GET):
        return _context(request, unit, rows)
    data = {f"version-{row.prefix}": str(row.version) for row in rows}
    data |= {name: str(request.GET[name]) for name in names & set(request.GET)}
    changes = _read(unit, rows, data)
    preview = quota_change_preview(changes) if changes and not any(r.errors for r in rows) else None
    others = _mark(unit, rows, list(preview.violations)) if preview else []
    offer = _offer(request, unit, changes) if preview and preview.violations else None
    extra = {"changes": changes, "preview": preview, "violations": others, "offer": offer}
    return {**_context(request, unit, rows, **extra), "reason": request.GET.get("reason", "")[:500]}


def _offer(request: HttpRequest, unit: OrgUnit, changes: list[QuotaChange]) -> EnvelopeOffer | None:
    """Inside the reader's envelope, a change the envelope cannot hold: the change request it could be."""
    return envelope_offer(request.user, changes) if may_set_directly(request.user, unit) else None


@login_required
def quota_edit(request: HttpRequest, unit_id: int) -> HttpResponse:
    unit = _editable(request, unit_id)
    rows = _rows(unit)
    if request.method != "POST":
        return render(request, "quotas/unit_edit.html", _prefilled(request, unit, rows))
    changes = _read(unit, rows, request.POST)
    if any(r.errors for r in rows):
        context = _context(request, unit, rows, form_errors=version_errors(rows))
        return render(request, "quotas/unit_edit.html", context, status=400)
    if not changes:
        messages.info(request, "Nothing changed: no quota was saved.")
        return redirect("quotas:unit", unit_id=unit.pk)
    reason = request.POST.get("reason", "")
    try:
        offer = _offer(request, unit, changes) if request.POST.get("as_request") else None
        if offer is not None and not offer.remaining:  # the failing change, with its envelopes raised
            created = services.change_request_submit(actor=request.user, reason=reason, changes=offer.changes)
            messages.success(request, f"Change request #{created.pk} sent: {'; '.join(offer.raises)}.")
            return redirect("quotas:request", request_id=created.pk)
        if may_set_directly(request.user, unit):
            services.quota_edit(actor=request.user, reason=reason, changes=changes)
            messages.success(request, f"Saved {len(changes)} quota change(s) on {unit.path}.")
            return redirect("quotas:unit", unit_id=unit.pk)
        created = services.change_request_submit(actor=request.user, reason=reason, changes=changes)
        messages.success(request, f"Change request #{created.pk} sent: a lead above {unit.path} decides.")
        return redirect("quotas:request", request_id=created.pk)
    except PolicyViolationError as exc:
        others = _mark(unit, rows, list(exc.violations))
        context = _context(request, unit, rows, violations=others, offer=_offer(request, unit, changes))
        return render(request, "quotas/unit_edit.html", context, status=400)
    except StaleVersionError as exc:
        fresh = _rows(unit)
        for row, new in zip(rows, fresh, strict=True):
            row.version, row.current = new.version, new.current
        current = ", ".join(f"{k} {v}" for k, v in exc.current.items())
        stale = (
            f"Someone changed this quota while you were editing: it is now {current}. Nothing was saved; "
            f"check your values against the new ones and save again."
        )
        return render(request, "quotas/unit_edit.html", _context(request, unit, rows, stale=stale), status=409)
    except InputError as exc:
        errors = {k: " ".join(v) for k, v in exc.errors.items()}
        return render(request, "quotas/unit_edit.html", _context(request, unit, rows, form_errors=errors), status=400)
    except NotAllowedError as exc:
        raise PermissionDenied(str(exc)) from exc
