"""The monthly governance review of an organisation or department: the tables (``review_data``), the
three formats (CSV, XLSX, PDF), and ``review_generate``, which stores a review with its files and
checksums (a rerun replaces it, never duplicates) and tells the unit's leads.

Tables, each with stable column names (``COLUMNS``; the README lists them):

* ``units`` — per unit and flavor: the quota, the month's device-hours (allocated, within, borrowed,
  lent, pending, active, productive and whether it is estimated), telemetry coverage, cost, idle cost
  and lent credit, fairness (wait p95, slowdown p95), the share of minutes at ≥ 90 % of the guarantee,
  guarantee shortfall and did-not-fit minutes and the queue and idle guarantee the plan would have
  left (the backtest), findings open during the month and resolved in it, the verdict, last month's
  allocated hours and cost where there is a last month, and contract compliance: reclaims of its
  guarantee within and beyond the contract's promise;
* ``recommendations`` — one per unit and flavor: the governance plan's item
  (``accounting.services.plan``: the same verdict the findings, the portal and the API give), with its
  evidence, the items it needs, and the change request it became;
* ``quota_changes`` — every quota change of the month from the audit trail: when, who, why, before → after;
* ``findings`` — the findings open at any time in the month (opened earlier and still open included);
* ``coverage`` — hours with and without telemetry per flavor, and where usage came from;
* ``pools`` — per flavor (pool): capacity, allocated, active share of allocated, productive, waiting
  demand and idle hours, with the change since the month before (accounting.policy.pools; an
  organisation's review: the fleet, a department's: its subtree against its guarantee);
* ``budgets`` — each GPU-hour budget of the subtree (accounting.services.budget_reports): its period,
  allowance, spend to the month's end, what is left, the day it ran out and the days it was held, the
  forecast while its period runs; with no budget in the subtree, a replay of one at 80 % of each
  unit's guarantee-hours (``basis: replay``), to show what budgets would have done.

The summary leads with the plan: what it changes, what it would have done to the month (backtest) and
what it cannot fix; it names the days without telemetry and the fleet's cost beside the units'.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Count, Q, Sum
from django.template.loader import render_to_string
from django.utils import timezone

from accounting.models import Finding, SourceRun, UsageHour
from accounting.pools import pool_report
from accounting.reclaims import reclaims
from accounting.selectors import fairness_report, showback_period, showback_report, unit_flavor_usage
from accounting.services.budget_reports import budget_month
from accounting.services.plan import governance_plan
from accounting.services.review_plan import fleet_cost, gap_days, plan_summary, recommendation_row
from quotas.models import AuditEvent, OrgUnit
from quotas.selectors import subtree

GPU = "nvidia.com/gpu"
FORMATS = ("csv", "xlsx", "pdf")
COLUMNS: dict[str, list[str]] = {
    "units": [
        "unit_path",
        "flavor",
        "guarantee",
        "burst",
        "lendable",
        "allocated_h",
        "within_h",
        "borrowed_h",
        "lent_h",
        "pending_h",
        "active_h",
        "productive_h",
        "productive_estimated",
        "telemetry_hours",
        "hours_in_month",
        "cost",
        "idle_cost",
        "lent_credit",
        "wait_p95_s",
        "slowdown_p95",
        "full_share",
        "shortfall_minutes",
        "did_not_fit_minutes",
        "queued_h_plan",
        "idle_guarantee_h_plan",
        "findings_opened",
        "findings_resolved",
        "verdict",
        "last_month_allocated_h",
        "last_month_cost",
    ],
    "recommendations": [
        "unit_path",
        "flavor",
        "verdict",
        "evidence",
        "guarantee_to",
        "burst_to",
        "lendable_to",
        "plan_item",
        "needs_items",
        "change_request",
    ],
    "quota_changes": ["at", "actor", "unit_path", "what", "reason", "before", "after"],
    "findings": ["id", "kind", "unit_path", "flavor", "state", "opened_at", "closed_at", "cost", "summary"],
    "coverage": ["flavor", "hours_in_month", "hours_with_telemetry", "gap_hours", "sources"],
    "pools": [
        "flavor",
        "memory_gb",
        "capacity_h",
        "allocated_h",
        "allocated_pct",
        "active_pct",
        "productive_pct",
        "pending_h",
        "idle_h",
        "allocated_pct_change_pp",
        "active_pct_change_pp",
    ],
    "budgets": [
        "unit_path",
        "flavor",
        "basis",
        "period",
        "action",
        "allowance_h",
        "spent_h",
        "remaining_h",
        "percent",
        "ran_out_on",
        "held_days",
        "forecast_exhaustion",
    ],
}


@dataclass
class ReviewData:
    unit_path: str
    month: str
    generated_at: datetime
    tables: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]


def _month_bounds(month: str) -> tuple[datetime, datetime]:
    period = showback_period(month)
    return period.start, period.end


def _previous(month: str) -> str:
    start, _ = _month_bounds(month)
    return (start - timedelta(days=1)).strftime("%Y-%m")


def review_data(unit: OrgUnit, month: str) -> ReviewData:
    """Everything the review says for ``unit`` and below in ``month`` (YYYY-MM, UTC)."""
    start, end = _month_bounds(month)
    hours_in_month = int((end - start).total_seconds() // 3600)
    rows = UsageHour.objects.filter(subtree("unit__path", unit.path), hour__gte=start, hour__lt=end)
    usage = unit_flavor_usage(rows)
    totals, units, flavors, quotas = usage.totals, usage.units, usage.flavors, usage.quotas
    show = {
        (line["unit_path"], line["flavor_key"]): line
        for line in showback_report(showback_period(month), within=unit.path, rollup=False)["lines"]
    }
    last = {
        (line["unit_path"], line["flavor_key"]): line
        for line in showback_report(showback_period(_previous(month)), within=unit.path, rollup=False)["lines"]
    }
    last_allocated = {
        (r["unit__path"], r["flavor_id"]): r["a"]
        for r in UsageHour.objects.filter(
            subtree("unit__path", unit.path), hour__gte=_month_bounds(_previous(month))[0], hour__lt=start
        )
        .values("unit__path", "flavor_id")
        .annotate(a=Sum("allocated"))
    }
    fair = {u["unit_path"]: u for u in fairness_report(showback_period(month), within=unit.path)["units"]}
    found = Finding.objects.filter(subtree("unit__path", unit.path)).select_related("unit", "flavor__cluster")
    overlapping = found.filter(
        Q(window_start__lt=end, window_end__gt=start)
        | Q(opened_at__lt=end) & (Q(closed_at__isnull=True) | Q(closed_at__gte=start))
    )
    opened = dict(overlapping.values("unit_id").annotate(n=Count("id")).values_list("unit_id", "n"))
    closed = dict(
        found.filter(closed_at__gte=start, closed_at__lt=end, state="resolved")
        .values("unit_id")
        .annotate(n=Count("id"))
        .values_list("unit_id", "n")
    )
    kept: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
    for reclaim in reclaims(start, end, {}):
        late = (reclaim.admitted - reclaim.submitted).total_seconds() > reclaim.promised_s
        kept[(reclaim.lender, reclaim.flavor)][1 if late else 0] += 1
    report = governance_plan(unit, month)
    table_units: list[dict[str, Any]] = []
    table_recs: list[dict[str, Any]] = []
    rec_of_item: dict[int, int] = {}
    for (uid, fid), r in sorted(totals.items(), key=lambda kv: (units[kv[0][0]].path, kv[0][1])):
        u, f = units[uid], flavors[fid]
        q = quotas.get((uid, fid))
        key = f"{f.cluster.name}/{f.name}"
        verdict = report.verdict(uid, key)
        today, planned = report.today.get((uid, key)), report.planned.get((uid, key))
        money = show.get((u.path, key), {})
        before = last.get((u.path, key), {})
        fairness = fair.get(u.path, {})
        table_units.append(
            {
                "unit_path": u.path,
                "flavor": key,
                "guarantee": q.guarantee if q else 0,
                "burst": q.burst if q else 0,
                "lendable": q.lendable if q else 0,
                "allocated_h": round(r["a"] or 0, 2),
                "within_h": round(r["w"] or 0, 2),
                "borrowed_h": round(r["b"] or 0, 2),
                "lent_h": round(r["lent_h"] or 0, 2),
                "pending_h": round(r["p"] or 0, 2),
                "active_h": None if r["act"] is None else round(r["act"], 2),
                "productive_h": None if r["prod"] is None else round(r["prod"], 2),
                "productive_estimated": bool(r["est"]),
                "telemetry_hours": r["hours"],
                "hours_in_month": hours_in_month,
                "cost": money.get("cost"),
                "idle_cost": money.get("idle_cost"),
                "lent_credit": money.get("lent_credit"),
                "wait_p95_s": fairness.get("wait_p95_s"),
                "slowdown_p95": fairness.get("slowdown_p95"),
                "full_share": round(r["full"] / r["mins"], 4) if r.get("mins") and (q and q.guarantee) else None,
                "shortfall_minutes": None if today is None else round(today.shortfall_minutes),
                "did_not_fit_minutes": None if today is None else round(today.did_not_fit_minutes),
                "queued_h_plan": None if planned is None else round(planned.queued_h, 1),
                "idle_guarantee_h_plan": None if planned is None else round(planned.idle_guarantee_h, 1),
                "findings_opened": opened.get(uid, 0),
                "findings_resolved": closed.get(uid, 0),
                "verdict": verdict["verdict"],
                "last_month_allocated_h": None
                if (u.path, fid) not in last_allocated
                else round(last_allocated[(u.path, fid)], 2),
                "last_month_cost": before.get("cost"),
                "reclaims_within_promise": kept[(uid, fid)][0] if (uid, fid) in kept else 0,
                "reclaims_beyond_promise": kept[(uid, fid)][1] if (uid, fid) in kept else 0,
            }
        )
        if (q and q.guarantee > 0) or verdict["item"] is not None:
            if verdict["item"] is not None:
                rec_of_item[verdict["item"]] = len(table_recs)
            table_recs.append(recommendation_row(report, u.path, key, fid, verdict))
    for row in table_recs:  # the items an item needs, as the review numbers them
        row["needs"] = [rec_of_item[i] for i in row.pop("needs_plan", []) if i in rec_of_item]
        row["needs_items"] = ", ".join(str(i) for i in row["needs"])
    changes = [
        {
            "at": e.at.isoformat(),
            "actor": e.actor_name,
            "unit_path": e.unit_path,
            "what": e.object_repr,
            "reason": e.reason,
            "before": json.dumps(e.before, sort_keys=True),
            "after": json.dumps(e.after, sort_keys=True),
        }
        for e in AuditEvent.objects.filter(action="quota_set", at__gte=start, at__lt=end)
        .filter(Q(unit_path=unit.path) | Q(unit_path__startswith=f"{unit.path}/"))
        .order_by("at")
    ]
    findings = [
        {
            "id": x.pk,
            "kind": x.kind,
            "unit_path": x.unit.path if x.unit else "",
            "flavor": x.flavor.key if x.flavor else "",
            "state": x.state,
            "opened_at": x.opened_at.isoformat(),
            "closed_at": x.closed_at.isoformat() if x.closed_at else None,
            "cost": None if x.cost is None else f"{x.cost:.2f}",
            "summary": x.summary,
        }
        for x in overlapping.order_by("opened_at", "id")
    ]
    per_flavor = rows.values("flavor_id", "hour").annotate(m=Sum("minutes")).values_list("flavor_id", "hour")
    covered: dict[int, set[datetime]] = defaultdict(set)
    for fid, hour in per_flavor.filter(m__gt=0):
        covered[fid].add(hour)
    sources = sorted(set(SourceRun.objects.filter(cluster__flavors__in=flavors).values_list("source", flat=True)))
    coverage: list[dict[str, Any]] = [
        {
            "flavor": f"{f.cluster.name}/{f.name}",
            "hours_in_month": hours_in_month,
            "hours_with_telemetry": len(covered[fid]),
            "gap_hours": hours_in_month - len(covered[fid]),
            "sources": ", ".join(sources) or "replay",
        }
        for fid, f in sorted(flavors.items(), key=lambda kv: kv[1].name)
    ]
    verdicts: dict[str, int] = defaultdict(int)
    for rec_row in table_recs:
        verdicts[rec_row["verdict"]] += 1
    costs = [Decimal(x["cost"]) for x in table_units if x["cost"] is not None]
    idle = [Decimal(x["idle_cost"]) for x in table_units if x["idle_cost"] is not None]
    summary = {
        "units": len({x["unit_path"] for x in table_units}),
        "allocated_h": round(sum(x["allocated_h"] for x in table_units), 1),
        "guarantee_h": round(sum(t["g"] or 0 for t in totals.values()), 1),
        "cost": f"{sum(costs, Decimal(0)):.2f}" if costs else None,
        "idle_cost": f"{sum(idle, Decimal(0)):.2f}" if idle else None,
        "verdicts": dict(verdicts),
        "gap_hours": sum(int(c["gap_hours"]) for c in coverage),
        "quota_changes": len(changes),
        "findings": len(findings),
        "has_last_month": any(x["last_month_allocated_h"] is not None for x in table_units),
        "gap_days": gap_days(covered, flavors, start, end),
        "fleet_cost": fleet_cost(flavors, hours_in_month),
        **plan_summary(report),
    }
    pools = pool_report(month, "" if unit.parent_id is None else unit.path)
    summary["pools"] = pools["pools"] + ([pools["fleet"]] if pools["fleet"] else [])
    budgets = budget_month(unit, start, end)
    ran_out = [b for b in budgets if b["ran_out_on"]]
    summary["budgets"] = {
        "basis": budgets[0]["basis"] if budgets else None,
        "count": len(budgets),
        "ran_out": [
            {k: b[k] for k in ("unit_path", "flavor", "ran_out_on", "held_days", "allowance_h", "spent_h")}
            for b in sorted(ran_out, key=lambda b: (b["ran_out_on"], b["unit_path"]))
        ],
    }
    tables = {
        "pools": [{k: v for k, v in line.items() if k != "before"} for line in summary["pools"]],
        "budgets": budgets,
        "units": table_units,
        "recommendations": table_recs,
        "quota_changes": changes,
        "findings": findings,
        "coverage": coverage,
    }
    return ReviewData(unit.path, month, timezone.now(), tables, summary)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet reads as the start of a formula (OWASP, CSV injection)."""


def as_text(value: str) -> str:
    """A text cell a spreadsheet shows as text: one starting like a formula gets a leading ``'``
    (OWASP's CSV-injection guidance), so a reason ``=HYPERLINK(…)`` stays words."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return as_text(value)
    return value


def write_csv(data: ReviewData, folder: Path) -> list[Path]:
    """One file per table, the columns of ``COLUMNS`` in order (a header line first)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for table, columns in COLUMNS.items():
        path = folder / f"{table}.csv"
        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(columns)
            for row in data.tables[table]:
                out.writerow([_cell(row.get(c)) for c in columns])
        written.append(path)
    return written


MONEY_COLUMNS = {"cost", "idle_cost", "lent_credit", "last_month_cost"}
HOUR_COLUMNS = {c for table in ("units", "budgets", "pools") for c in COLUMNS[table] if c.endswith("_h")}


def write_xlsx(data: ReviewData, path: Path) -> Path:
    """One sheet per table: typed cells, frozen header, number formats, and a native bar chart of
    allocated vs guarantee-hours per unit on the units sheet."""
    from openpyxl import Workbook
    from openpyxl.chart import BarChart, Reference
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    book = Workbook()
    book.remove(book.active)  # type: ignore[arg-type]
    cover = book.create_sheet("summary")
    cover.append(["Governance review", data.unit_path])
    cover.append(["Month", data.month])
    cover.append(["Generated", data.generated_at.replace(tzinfo=None)])
    for key, value in data.summary.items():
        if key in MONEY_COLUMNS and value is not None:  # a number to add up, not text
            cover.append([key, float(Decimal(value))])
            cover.cell(cover.max_row, 2).number_format = "#,##0.00"
        else:
            cover.append([key, json.dumps(value) if isinstance(value, dict | list) else value])
    cover["A1"].font = Font(bold=True, size=14)
    for table, columns in COLUMNS.items():
        sheet = book.create_sheet(table)
        sheet.append(columns)
        for cell in sheet[1]:
            cell.font = Font(bold=True)
        for row in data.tables[table]:
            values = []
            for c in columns:
                value = row.get(c)
                if c in MONEY_COLUMNS and value is not None:
                    value = float(Decimal(value))
                values.append(value)
            sheet.append(values)
            for cell in sheet[sheet.max_row]:
                if isinstance(cell.value, str):  # never a formula: openpyxl makes one of any "=…" string
                    cell.data_type = "s"
        sheet.freeze_panes = "A2"
        for i, column in enumerate(columns, 1):
            letter = get_column_letter(i)
            sheet.column_dimensions[letter].width = max(12, min(60, len(column) + 4))
            fmt = "#,##0.00" if column in MONEY_COLUMNS else "#,##0.0" if column in HOUR_COLUMNS else None
            if fmt:
                for (cell,) in sheet.iter_rows(min_row=2, min_col=i, max_col=i):
                    cell.number_format = fmt
        if table == "units" and data.tables[table]:
            chart = BarChart()
            chart.title = "Allocated device-hours per unit and flavor"
            chart.y_axis.title = "device-hours"
            count = len(data.tables[table])
            col = columns.index("allocated_h") + 1
            chart.add_data(Reference(sheet, min_col=col, min_row=1, max_row=count + 1), titles_from_data=True)
            chart.set_categories(Reference(sheet, min_col=1, min_row=2, max_row=count + 1))
            chart.width, chart.height = 24, 12
            sheet.add_chart(chart, f"{get_column_letter(len(columns) + 2)}2")
    book.save(path)
    return path


PLOTTED = 40
"""Rows a plot shows (the largest by guarantee and use): a department of 500 teams stays readable."""


def _png(fig: Any) -> str:
    import base64

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=150)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _finish(plt: Any, fig: Any, ax: Any, xlabel: str) -> str:
    """The plots' common dress (largest first, a small legend) and the figure as a PNG data URI."""
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.legend(loc="lower right", fontsize=7)
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    uri = _png(fig)
    plt.close(fig)
    return uri


def _plots(data: ReviewData) -> dict[str, str]:
    """Plots for the PDF (matplotlib, no display): allocated vs guarantee-hours per unit, and the cost
    split. Returned as PNG data URIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    everything = data.tables["units"]
    units = sorted(everything, key=lambda u: -(u["allocated_h"] + u["guarantee"] * u["telemetry_hours"]))[:PLOTTED]
    out: dict[str, str] = {
        "note": f"the {len(units)} largest of {len(everything)}" if len(everything) > PLOTTED else ""
    }
    if units:
        labels = [f"{u['unit_path'].rsplit('/', 1)[-1]} · {u['flavor'].rsplit('/', 1)[-1]}" for u in units]
        fig, ax = plt.subplots(figsize=(8, max(2.5, 0.25 * len(units))))
        ax.barh(labels, [u["within_h"] for u in units], color="#3b6fd8", label="used inside the guarantee")
        ax.barh(
            labels,
            [u["borrowed_h"] for u in units],
            left=[u["within_h"] for u in units],
            color="#e3a21a",
            label="borrowed",
        )
        ax.scatter(
            [u["guarantee"] * u["telemetry_hours"] for u in units],
            labels,
            color="#1d2430",
            marker="|",
            s=200,
            label="guarantee-hours",
        )
        out["use"] = _finish(plt, fig, ax, "device-hours")
        planned = [u for u in units if u.get("queued_h_plan") is not None and (u["pending_h"] or u["queued_h_plan"])]
        if planned:
            names = [f"{u['unit_path'].rsplit('/', 1)[-1]} · {u['flavor'].rsplit('/', 1)[-1]}" for u in planned]
            fig, ax = plt.subplots(figsize=(8, max(2.5, 0.25 * len(planned))))
            rows = list(range(len(planned)))
            ax.barh([y - 0.2 for y in rows], [u["pending_h"] for u in planned], height=0.4, color="#c0392b",
                    label="queued this month")  # fmt: skip
            ax.barh([y + 0.2 for y in rows], [u["queued_h_plan"] for u in planned], height=0.4, color="#2e8b57",
                    label="queued with the plan (backtest)")  # fmt: skip
            ax.set_yticks(rows, names)
            out["plan"] = _finish(plt, fig, ax, "queued device-hours")
        costed = [u for u in units if u["cost"] is not None]
        if costed:
            fig, ax = plt.subplots(figsize=(8, max(2.5, 0.25 * len(costed))))
            idle = [float(u["idle_cost"] or 0) for u in costed]
            rest = [float(u["cost"]) - i for u, i in zip(costed, idle, strict=True)]
            names = [f"{u['unit_path'].rsplit('/', 1)[-1]} · {u['flavor'].rsplit('/', 1)[-1]}" for u in costed]
            ax.barh(names, rest, color="#3b6fd8", label="used, borrowed, shared")
            ax.barh(names, idle, left=rest, color="#c9d8f5", label="idle guarantee")
            out["cost"] = _finish(plt, fig, ax, "cost")
    return out


def write_pdf(data: ReviewData, path: Path) -> Path:
    """A cover summary, the plots, and the tables (rows never split across pages), page numbers,
    generation time and data coverage — from ``templates/accounting/review_pdf.html`` by WeasyPrint."""
    try:
        from weasyprint import HTML
    except OSError as exc:  # the pango libraries are missing
        raise RuntimeError(
            f"PDF needs the pango library ({exc}): apt-get install libpango-1.0-0 libpangoft2-1.0-0"
        ) from exc
    import logging

    for name in ("weasyprint", "weasyprint.progress"):  # its progress is per page: hundreds of lines
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("fontTools").setLevel(logging.WARNING)
    changes = [r for r in data.tables["recommendations"] if r["verdict"] != "keep"]
    context = {
        "data": data,
        "plots": _plots(data),
        "columns": COLUMNS,
        "changes": changes,
        "keep": len(data.tables["recommendations"]) - len(changes),
    }
    html = render_to_string("accounting/review_pdf.html", context)
    HTML(string=html).write_pdf(path)
    return path


def review_files(data: ReviewData, folder: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write the review in ``formats`` under ``folder``; the paths written."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"format {', '.join(unknown)}: use {', '.join(FORMATS)}")
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"review-{data.unit_path.replace('/', '-')}-{data.month}"
    written: list[Path] = []
    if "csv" in formats:
        written += write_csv(data, folder / f"{stem}-csv")
    if "xlsx" in formats:
        written.append(write_xlsx(data, folder / f"{stem}.xlsx"))
    if "pdf" in formats:
        written.append(write_pdf(data, folder / f"{stem}.pdf"))
    return written


def review_generate(*, unit: OrgUnit, month: str, formats: tuple[str, ...] = FORMATS) -> Any:
    """Build and store the review of ``unit`` for ``month``: its files in the database with their
    checksums (any web process serves them), one ``Review`` row per unit and month (a rerun replaces
    it and its files). Mails the unit's leads the link."""
    import tempfile

    from accounting.models import Review, ReviewFile

    data = review_data(unit, month)
    with tempfile.TemporaryDirectory(prefix="allot-review-") as tmp:
        written = review_files(data, Path(tmp), formats)
        stored = {str(p.relative_to(tmp)): p.read_bytes() for p in written}
    files = {name: hashlib.sha256(content).hexdigest() for name, content in stored.items()}
    with transaction.atomic():
        review, _ = Review.objects.update_or_create(
            unit=unit,
            month=month,
            defaults={
                "generated_at": data.generated_at,
                "files": files,
                "summary": data.summary,
                "recommendations": data.tables["recommendations"],
            },
        )
        ReviewFile.objects.filter(review=review).delete()
        ReviewFile.objects.bulk_create(
            [
                ReviewFile(review=review, name=name, content=content, sha256=files[name], size=len(content))
                for name, content in sorted(stored.items())
            ]
        )
        emails = sorted({u.email for u in unit.leads.all() if u.email})
        if emails:
            subject = f"[Allot] governance review {unit.path} {month}"
            text = f"The review of {unit.path} for {month} is ready: /reviews/{review.pk}/\n\n"
            text += json.dumps(data.summary, indent=2) + "\n"
            transaction.on_commit(lambda: send_mail(subject, text, None, emails, fail_silently=True))
    return review


def last_month(now: datetime | None = None) -> str:
    now = now or datetime.now(tz=UTC)
    return (now.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")


def _may_accept(actor: Any, unit: Any, rec: dict[str, Any]) -> None:
    """Leads of the recommendation's unit or above (or of the review's unit), and platform admins."""
    from quotas.access import NotAllowedError, may_request
    from quotas.models import OrgUnit

    target = OrgUnit.objects.filter(path=rec.get("unit_path"), archived_at__isnull=True).first() or unit
    if not (getattr(actor, "is_authenticated", False) and may_request(actor, target)):
        raise NotAllowedError(f"you lead neither {target.path} nor a unit above it: ask its lead to accept this")


@transaction.atomic
def review_accept(*, actor: Any, review: Any, index: int, reason: str = "") -> Any:
    """Turn recommendation ``index`` of a stored review into a change request (approved through the
    usual flow) and record it on the review; audited. A recommendation accepted already returns its
    request."""
    from accounting.models import Review
    from accounting.services.findings import request_suggested_change
    from quotas.errors import InputError

    review = Review.objects.select_for_update().select_related("unit").get(pk=review.pk)
    if not 0 <= index < len(review.recommendations):
        raise InputError(
            "index", f"review #{review.pk} has {len(review.recommendations)} recommendations", "pick one of them"
        )
    rec = review.recommendations[index]
    _may_accept(actor, review.unit, rec)  # before anything is answered, accepted already or not
    if rec.get("change_request"):
        from quotas.models import ChangeRequest

        return ChangeRequest.objects.get(pk=rec["change_request"])
    action = rec.get("action")
    if not action:
        raise InputError(
            "index", f"{rec['unit_path']} {rec['flavor']}: the review says {rec['verdict']}", "nothing to request"
        )
    if rec.get("needs"):
        raise InputError(
            "index",
            f"{rec['unit_path']} {rec['flavor']} ({rec['verdict']}) breaks the invariants on its own: it needs "
            f"recommendations {', '.join(map(str, rec['needs']))}, which make room for it",
            "accept the whole plan (one change request)",
        )
    why = (reason.strip() + " — " if reason.strip() else "") + (
        f"governance review {review.unit.path} {review.month}: {rec['verdict']} — {rec['evidence']}"
    )
    request = request_suggested_change(actor=actor, action=action, reason=why)
    recommendations = list(review.recommendations)
    recommendations[index] = {**rec, "change_request": request.pk}
    review.recommendations = recommendations
    review.save(update_fields=["recommendations"])
    after = {"change_request": request.pk, "verdict": rec["verdict"]}
    _audit_accept(actor, review, "review_accept", f"#{index}", after, why, rec["unit_path"])
    return request


def _audit_accept(actor: Any, review: Any, action: str, what: str, after: dict[str, Any], why: str, path: str) -> None:
    """The audit row of a review's recommendation (or plan) turned into a change request."""
    from quotas.services.audit import audit_event, audit_write

    audit_write(
        [
            audit_event(
                actor=actor, action=action, obj_type="review", obj_id=review.pk,
                obj_repr=f"{review.unit.path} {review.month} {what}", before=None, after=after, reason=why[:500],
                unit_path=path,
            )
        ]
    )  # fmt: skip


@transaction.atomic
def review_accept_plan(*, actor: Any, review: Any, reason: str = "") -> Any:
    """The review's whole plan as one change request (``accounting.services.plan.plan_accept``, decided
    by someone above every unit it changes and applied atomically); recorded on the review, audited."""
    from accounting.models import Review
    from accounting.services.plan import plan_accept

    review = Review.objects.select_for_update().select_related("unit").get(pk=review.pk)
    earlier = review.summary.get("plan_change_request")
    if earlier:  # accepted already (a second click, another head): that request, checked like a new one
        from quotas.access import NotAllowedError, may_read_request
        from quotas.models import ChangeRequest

        found = ChangeRequest.objects.filter(pk=earlier).first()
        if found is not None:
            if not may_read_request(actor, found):
                raise NotAllowedError(f"you lead neither {review.unit.path} nor a unit above it")
            return found
    request = plan_accept(actor=actor, unit=review.unit, month=review.month, reason=reason)
    review.summary = {**review.summary, "plan_change_request": request.pk}
    review.save(update_fields=["summary"])
    after = {"change_request": request.pk, "items": len(request.changes)}
    _audit_accept(actor, review, "review_accept_plan", "plan", after, request.reason, review.unit.path)
    return request
