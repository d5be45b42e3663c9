"""The Celery app. Periodic schedules live here, in one place."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("allot")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "policy-check-hourly": {"task": "quotas.tasks.policy_check", "schedule": 3600.0},
}
