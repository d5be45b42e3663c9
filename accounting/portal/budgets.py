"""GPU-hour budgets in the portal: the unit page's budget panel (status and burn-down per flavor) and
the budget form (``/units/<id>/budgets/``): set directly inside your envelope, or ask with a change
request above it; errors name the flavor and the field, and nothing typed is lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from accounting.charts import burn_down_chart
from accounting.services.budgets import BudgetView, budget_views, daily_spend
from quotas import services
from quotas.access import NotAllowedError, may_request, may_set_directly
from quotas.errors import InputError, StaleVersionError
from quotas.models import Budget, OrgUnit, Quota, ResourceFlavor, WorkloadTier
from quotas.policy import budgets as bud
from quotas.policy.violations import PolicyViolationError, Violation
from quotas.portal.edit import VERSION_MISSING, form_version
from quotas.services.budgets import BudgetChange, budget_delete, budget_edit, budget_proposal

ACTIONS = [
    ("report", "report: findings and mail only"),
    ("no-borrowing", "no borrowing: keeps its guarantee, may not borrow"),
    ("hold", "hold: no new work of its tiers is admitted; running work finishes"),
    ("deny", "deny: new work of its tiers is refused with the budget in the message"),
]
INPUTS = ("device_hours", "period", "action", "warn_percent", "carry_over_cap", "oversubscription", "starts_on")


def budget_panel(unit: OrgUnit) -> list[dict[str, Any]]:
    """The unit page's budgets: per flavor its status and burn-down chart (budgets are read like quotas:
    device-hours, not costs)."""
    now = timezone.now()
    panels = []
    for view in budget_views(unit_ids=[unit.pk], now=now):
        s = view.status
        lines = bud.burn_down(
            view.budget,
            allowance=s.allowance,
            spent=s.spent,
            daily=daily_spend(view),
            rate_per_day=s.rate_per_day,
            now=now,
        )
        panels.append({"view": view, "chart": burn_down_chart(lines, now=now), "sentence": sentence(view)})
    return panels


def sentence(view: BudgetView) -> str:
    """The budget's state in one sentence, as the panel, findings and mail say it."""
    s, b = view.status, view.budget
    name = view.unit_path.rsplit("/", 1)[-1]
    head = (
        f"{name} has spent {s.spent:,.0f} of {s.allowance:,.0f} device-hours ({s.percent:.0f} %) "
        f"of its {b.period} budget on {b.flavor}"
    )
    if s.level is bud.BudgetLevel.SPENT:
        return f"{head}: spent — {bud.when_spent(b)} until the period resets on {s.period_end:%d %b %Y}."
    if s.exhausts_at is not None:
        rate = f"{s.rate_per_day:,.0f} a day"
        return f"{head}; at this rate ({rate}) it runs out on {s.exhausts_at:%d %b}, before the period ends."
    return f"{head}; {s.remaining:,.0f} left until {s.period_end:%d %b %Y}."


@dataclass
class FormRow:
    flavor: ResourceFlavor
    current: Budget | None
    guarantee: int
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return f"b{self.flavor.pk}"

    @property
    def fields(self) -> list[dict[str, Any]]:
        """The text fields as the template draws them: name, label, value, help, error."""
        helps = {
            "device_hours": f"per period; e.g. {self.suggested:,} (80 % of the guarantee's hours in 30 days)",
            "warn_percent": "warn at this share spent (1–100)",
            "carry_over_cap": "unused hours it may bring into the next period (0: none)",
            "oversubscription": "its units' budgets may add up to this × its own",
            "starts_on": "YYYY-MM-DD, a period's first day; empty: this period",
        }
        labels = {"device_hours": "Device-hours", "warn_percent": "Warn at %", "carry_over_cap": "Carry-over cap",
                  "oversubscription": "Oversubscription ×", "starts_on": "Starts on"}  # fmt: skip
        return [
            {
                "name": n,
                "label": labels[n],
                "value": self.values.get(n, ""),
                "help": helps[n],
                "error": self.errors.get(n, ""),
            }
            for n in labels
        ]

    @property
    def suggested(self) -> int:
        """80 % of the guarantee's device-hours in a 30-day month: a starting point, not a rule."""
        return round(0.8 * self.guarantee * 24 * 30)


def _rows(unit: OrgUnit) -> list[FormRow]:
    """Every GPU flavor the unit (or its parent) has a quota or budget on."""
    owners = [unit.pk] + ([unit.parent_id] if unit.parent_id else [])
    ids = set(Quota.objects.filter(unit_id__in=owners, resource="nvidia.com/gpu").values_list("flavor_id", flat=True))
    ids |= set(Budget.objects.filter(unit_id__in=owners).values_list("flavor_id", flat=True))
    budgets = {b.flavor_id: b for b in Budget.objects.filter(unit=unit)}
    guarantees = dict(Quota.objects.filter(unit=unit, resource="nvidia.com/gpu").values_list("flavor_id", "guarantee"))
    flavors = ResourceFlavor.objects.select_related("cluster").filter(pk__in=ids).order_by("cluster__name", "name")
    rows = []
    for flavor in flavors:
        row = FormRow(flavor, budgets.get(flavor.pk), guarantees.get(flavor.pk, 0))
        current = row.current
        row.values = {
            "device_hours": current.device_hours if current else "",
            "period": current.period if current else "month",
            "action": current.action if current else "report",
            "tiers": list(current.tiers) if current else None,
            "warn_percent": current.warn_percent if current else 80,
            "carry_over_cap": current.carry_over_cap if current else 0,
            "oversubscription": current.oversubscription if current else "1.00",
            "starts_on": current.starts_on.isoformat() if current and current.starts_on else "",
            "version": current.version if current else 0,
        }
        rows.append(row)
    return rows


def _read(rows: list[FormRow], unit: OrgUnit, post: Any) -> tuple[list[BudgetChange], list[tuple[Budget, int]]]:
    """The changed budgets as asked, and the ones ticked for removal with the version seen; each row keeps
    what was typed. A row without a valid version of what it was made on gets an error, not a change."""
    changes, removed = [], []
    for row in rows:
        p = row.prefix
        asked = {name: post.get(f"{p}-{name}", "").strip() for name in INPUTS}
        asked["tiers"] = post.getlist(f"{p}-tiers")
        version = post.get(f"{p}-version", "")
        typed = {**asked, "version": version}
        seen = form_version(version)
        if post.get(f"{p}-remove") and row.current is not None:
            row.values = {**row.values, **typed, "remove": True}
            if seen is None:
                row.errors["version"] = VERSION_MISSING
            else:
                removed.append((row.current, seen))
            continue
        if row.current is None and not asked["device_hours"]:
            row.values = {**row.values, **typed}
            continue  # no budget asked for on this flavor
        unchanged = (
            row.current is not None
            and all(str(row.values[name]) == asked[name] for name in INPUTS)
            and sorted(row.values["tiers"] or []) == sorted(asked["tiers"])
        )
        row.values = {**row.values, **typed}
        if unchanged:
            continue
        if seen is None:  # never the current version: that would hide a change made meanwhile
            row.errors["version"] = VERSION_MISSING
            continue
        changes.append(
            BudgetChange(
                unit.pk,
                row.flavor.pk,
                **{name: (asked[name] if asked[name] != "" else None) for name in INPUTS},
                tiers=asked["tiers"] or None,
                expected_version=seen,
            )
        )
    return changes, removed


def _errors(rows: list[FormRow], changes: list[BudgetChange]) -> None:
    """Each changed row's field errors, found one row at a time so each names its flavor."""
    by_flavor = {row.flavor.pk: row for row in rows}
    for change in changes:
        try:
            budget_proposal([change])
        except InputError as exc:
            by_flavor[change.flavor_id].errors = {k: " ".join(v) for k, v in exc.errors.items()}


def _editable(request: HttpRequest, unit_id: int) -> OrgUnit:
    unit = get_object_or_404(OrgUnit, pk=unit_id, archived_at__isnull=True)
    if not may_request(request.user, unit):
        raise PermissionDenied(f"only the leads of {unit.path} or of a unit above it may set its budgets")
    return unit


def _page(request: HttpRequest, unit: OrgUnit, rows: list[FormRow], status: int = 200, **extra: Any) -> HttpResponse:
    tiers = list(WorkloadTier.objects.order_by("-priority").values_list("name", flat=True))
    defaults = bud.default_tiers(dict(WorkloadTier.objects.values_list("name", "priority")))
    for row in rows:
        if row.values.get("tiers") is None:
            row.values["tiers"] = defaults
    labels = {"version": "version", "period": "period", "action": "when spent", "tiers": "tiers"}
    labels |= {f["name"]: f["label"] for row in rows[:1] for f in row.fields}
    row_errors = [
        {
            "flavor": row.flavor.key,
            "label": labels.get(name, name),
            "message": message,
            "anchor": f"{row.prefix}-version-error" if name == "version" else f"{row.prefix}-{name}",
        }
        for row in rows
        for name, message in row.errors.items()
    ]
    context = {
        "unit": unit,
        "rows": rows,
        "row_errors": row_errors,
        "tiers": tiers,
        "actions": ACTIONS,
        "direct": may_set_directly(request.user, unit),
        "reason": request.POST.get("reason", ""),
        **extra,
    }
    return render(request, "accounting/budgets_edit.html", context, status=status)


@login_required
def budgets_edit(request: HttpRequest, unit_id: int) -> HttpResponse:
    unit = _editable(request, unit_id)
    rows = _rows(unit)
    if request.method != "POST":
        return _page(request, unit, rows)
    changes, removed = _read(rows, unit, request.POST)
    if not changes and not removed and not any(row.errors for row in rows):
        messages.info(request, "Nothing changed: no budget was saved.")
        return redirect("quotas:unit", unit_id=unit.pk)
    _errors(rows, changes)
    if any(row.errors for row in rows):
        return _page(request, unit, rows, 400)
    reason = request.POST.get("reason", "")
    direct = may_set_directly(request.user, unit)
    if removed and not direct:
        return _page(request, unit, rows, 403, form_errors={"remove": "only a lead above this unit removes a budget"})
    violations: list[Violation] = []
    try:
        if direct:
            if changes:
                budget_edit(actor=request.user, reason=reason, changes=changes)
            for budget, seen in removed:
                budget_delete(actor=request.user, reason=reason, budget=budget, expected_version=seen)
            messages.success(request, f"Saved {len(changes) + len(removed)} budget change(s) on {unit.path}.")
            return redirect("quotas:unit", unit_id=unit.pk)
        created = services.change_request_submit(actor=request.user, reason=reason, changes=changes)
        messages.success(request, f"Change request #{created.pk} sent: a lead above {unit.path} decides.")
        return redirect("quotas:request", request_id=created.pk)
    except PolicyViolationError as exc:
        violations = list(exc.violations)
    except StaleVersionError as exc:
        return _page(
            request,
            unit,
            _rows(unit),
            409,
            stale=f"{exc}. Nothing was saved: the form shows the budgets as they are now; enter your change again.",
        )
    except InputError as exc:
        return _page(request, unit, rows, 400, form_errors={k: " ".join(v) for k, v in exc.errors.items()})
    except NotAllowedError as exc:
        raise PermissionDenied(str(exc)) from exc
    return _page(request, unit, rows, 400, violations=violations)
