"""The PDF of a large review: a summary plus one section per department (the review unit's direct
children), so a 1,000-team organisation's PDF stays a few dozen pages; every row stays in the CSV and
XLSX. Below ``FULL_ROWS`` unit-flavor rows the PDF lists every row as before."""

from __future__ import annotations

from collections import Counter, defaultdict
from decimal import Decimal
from typing import Any

from accounting.services.review_tables import ReviewData

FULL_ROWS = 60
"""Up to this many unit-flavor rows, the PDF lists every one."""
TOP = 25
"""In a compact PDF: the plan's changes, findings and budgets that ran out it lists (the rest: CSV/XLSX)."""


def section_of(unit_path: str, path: str) -> str:
    """The section a row belongs to: the review unit's child above it (or the review unit itself)."""
    if path == unit_path or not path.startswith(unit_path + "/"):
        return unit_path
    return f"{unit_path}/{path[len(unit_path) + 1 :].split('/', 1)[0]}"


def sections(data: ReviewData) -> list[dict[str, Any]]:
    """Per section and flavor: units, guarantees, device-hours, costs and the plan's verdicts, summed
    from the units table (so the sections add up to the table)."""
    verdicts = {(r["unit_path"], r["flavor"]): r["verdict"] for r in data.tables["recommendations"]}
    found: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"units": 0, "guarantee": 0, "allocated_h": 0.0, "borrowed_h": 0.0, "pending_h": 0.0,
                 "queued_h_plan": 0.0, "cost": None, "idle_cost": None, "verdicts": Counter()}
    )  # fmt: skip
    for u in data.tables["units"]:
        row = found[(section_of(data.unit_path, u["unit_path"]), u["flavor"])]
        row["units"] += 1
        row["guarantee"] += u["guarantee"]
        for name in ("allocated_h", "borrowed_h", "pending_h"):
            row[name] += u[name] or 0.0
        row["queued_h_plan"] += u.get("queued_h_plan") or 0.0
        for name in ("cost", "idle_cost"):
            if u[name] is not None:
                row[name] = (row[name] or Decimal(0)) + Decimal(u[name])
        row["verdicts"][verdicts.get((u["unit_path"], u["flavor"]), "keep")] += 1
    return [
        {
            "section": s,
            "flavor": f,
            **row,
            "verdicts": ", ".join(f"{n} {v}" for v, n in sorted(row["verdicts"].items())),
        }
        for (s, f), row in sorted(found.items())
    ]


def pdf_context(data: ReviewData) -> dict[str, Any]:
    """What the PDF template lists: every row of a small review; the sections and the top rows of a
    large one (saying how many more the CSV and XLSX hold)."""
    changes = [r for r in data.tables["recommendations"] if r["verdict"] != "keep"]
    keep = len(data.tables["recommendations"]) - len(changes)
    if len(data.tables["units"]) <= FULL_ROWS:
        return {"compact": False, "changes": changes, "keep": keep, "findings": data.tables["findings"],
                "budgets": data.tables["budgets"]}  # fmt: skip
    findings = sorted(data.tables["findings"], key=lambda f: -float(f["cost"] or 0))
    ran_out = [b for b in data.tables["budgets"] if b["ran_out_on"]]
    return {
        "compact": True, "sections": sections(data), "changes": changes[:TOP], "more_changes": len(changes) - TOP,
        "keep": keep, "findings": findings[:TOP], "more_findings": len(findings) - TOP, "budgets": ran_out[:TOP],
        "more_budgets": len(data.tables["budgets"]) - min(TOP, len(ran_out)),
    }  # fmt: skip
