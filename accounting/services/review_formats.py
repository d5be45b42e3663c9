"""The review's three formats from its tables: CSV (one file per table; a cell a spreadsheet would run as
a formula is written as text), XLSX (one sheet per table, money and hours formatted) and PDF (the
summary, the tables and their plots, through WeasyPrint)."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.template.loader import render_to_string

from accounting.services.review_sections import pdf_context
from accounting.services.review_tables import COLUMNS, ReviewData

FORMATS = ("csv", "xlsx", "pdf")


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
        for number, row in enumerate(data.tables[table], 2):  # (max_row is a scan of every cell: not per row)
            values = []
            for c in columns:
                value = row.get(c)
                if c in MONEY_COLUMNS and value is not None:
                    value = float(Decimal(value))
                values.append(value)
            sheet.append(values)
            for i, value in enumerate(values, 1):
                if isinstance(value, str):  # never a formula: openpyxl makes one of any "=…" string
                    sheet.cell(number, i).data_type = "s"
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
    context = {"data": data, "plots": _plots(data), "columns": COLUMNS, **pdf_context(data)}
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
