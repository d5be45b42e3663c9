"""Beat's periodic entries: what ran when (written by beat, read by the Clusters page)."""

from __future__ import annotations

from django.db.models import F
from django.utils import timezone

from quotas.models import BeatRun


def beat_run_record(*, name: str, task: str) -> None:
    """Record that beat sent entry ``name`` now: one row per entry, the count raised in SQL."""
    now = timezone.now()
    updated = BeatRun.objects.filter(name=name).update(task=task, last_run_at=now, run_count=F("run_count") + 1)
    if not updated:
        BeatRun.objects.get_or_create(name=name, defaults={"task": task, "last_run_at": now, "run_count": 1})
