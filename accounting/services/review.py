"""The monthly governance review of an organisation or department: ``review_generate`` builds its tables
(.review_tables), writes the three formats (.review_formats), stores the review with its files and
checksums and tells the unit's leads. A review is a record: built again for the same month it becomes
a new version beside the earlier ones, saying what differs from the one before (``review_once`` builds
a month's first version only: what beat and a redelivered task call). A closed month's tables read the
terms in force at its end (``quotas.history``), so a later approval does not make a version differ.
Accepting its recommendations: .review_accept."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.mail import send_mail
from django.db import transaction

from accounting.services.review_formats import FORMATS, review_files
from accounting.services.review_tables import review_data
from quotas.models import OrgUnit


def review_once(*, unit: OrgUnit, month: str, formats: tuple[str, ...] = FORMATS) -> Any:
    """The month's review of ``unit``: its newest version if one was built, else the first one."""
    from accounting.models import Review

    found = Review.objects.filter(unit=unit, month=month).order_by("-version").first()
    return found if found is not None else review_generate(unit=unit, month=month, formats=formats)


def review_generate(*, unit: OrgUnit, month: str, formats: tuple[str, ...] = FORMATS) -> Any:
    """Build and store a new version of the review of ``unit`` for ``month``: its files in the database
    with their checksums (any web process serves them), beside the earlier versions, with what differs
    from the newest of them. Mails the unit's leads the link."""
    import tempfile

    from accounting.models import Review, ReviewFile

    data = review_data(unit, month)
    with tempfile.TemporaryDirectory(prefix="allot-review-") as tmp:
        written = review_files(data, Path(tmp), formats)
        stored = {str(p.relative_to(tmp)): p.read_bytes() for p in written}
    files = {name: hashlib.sha256(content).hexdigest() for name, content in stored.items()}
    with transaction.atomic():
        OrgUnit.objects.select_for_update().filter(pk=unit.pk).first()  # one new version at a time per unit
        earlier = Review.objects.filter(unit=unit, month=month).order_by("-version").first()
        review = Review.objects.create(
            unit=unit,
            month=month,
            version=earlier.version + 1 if earlier else 1,
            generated_at=data.generated_at,
            files=files,
            summary=data.summary,
            recommendations=data.tables["recommendations"],
            differs=differences(earlier, files, data.summary) if earlier else {},
        )
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


# Figures of a review that are not the month's: when it was built, and what was accepted from it
_NOT_THE_MONTH = {"generated_at", "plan_change_request"}


def differences(earlier: Any, files: dict[str, str], summary: dict[str, Any]) -> dict[str, Any]:
    """What differs between version ``earlier`` and the new one: the files whose bytes changed (or
    that one has and the other not) and the summary figures that changed, each before → after. The
    generation time is in every file's cover, so only the tables' files (CSV) say whether the month's
    figures changed; the XLSX and PDF differ in their cover always."""
    names = sorted(set(earlier.files) | set(files))
    changed = [n for n in names if earlier.files.get(n) != files.get(n)]
    figures = {
        key: {"before": earlier.summary.get(key), "after": summary.get(key)}
        for key in sorted(set(earlier.summary) | set(summary))
        if key not in _NOT_THE_MONTH and earlier.summary.get(key) != summary.get(key)
    }
    tables = [n for n in changed if n.endswith(".csv")]
    return {
        "version": earlier.version,
        "files": changed,
        "tables": tables,
        "summary": figures,
        "same_figures": not tables and not figures,
    }


def last_month(now: datetime | None = None) -> str:
    now = now or datetime.now(tz=UTC)
    return (now.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
