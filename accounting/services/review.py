"""The monthly governance review of an organisation or department: ``review_generate`` builds its tables
(.review_tables), writes the three formats (.review_formats), stores the review with its files and
checksums (a rerun replaces it, never duplicates) and tells the unit's leads. Accepting its
recommendations: .review_accept."""

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
