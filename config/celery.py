"""The Celery app. Periodic schedules live here, in one place."""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

from config.env import env_int

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("allot")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# Read through config.env, not django.conf.settings: this module is imported while settings load.
app.conf.beat_schedule = {
    "policy-check-hourly": {"task": "quotas.tasks.policy_check", "schedule": 3600.0},
    "kueue-drift-check": {
        "task": "quotas.tasks.drift_check",
        "schedule": float(
            env_int(
                "ALLOT_KUBERNETES_DRIFT_CHECK_SECONDS",
                300,
                help="How often beat checks every Kubernetes cluster for drift.",
            )
        ),
        "args": ("kubernetes",),
    },
    "usage-slurm-ingest": {  # sacct over a window from the last watermark, with an hour's overlap
        "task": "accounting.tasks.ingest_all_slurm",
        "schedule": float(
            env_int("ALLOT_USAGE_SLURM_SECONDS", 300, help="How often beat ingests every Slurm cluster's sacct.")
        ),
    },
    "usage-kueue-resync": {  # list every Workload; the usage-watcher (allot_watch_kueue) sees transitions live
        "task": "accounting.tasks.resync_all_kueue",
        "schedule": float(
            env_int(
                "ALLOT_USAGE_KUEUE_RESYNC_SECONDS",
                900,
                help=(
                    "How often beat lists every Kubernetes cluster's Kueue Workloads (the usage "
                    "watcher follows them live)."
                ),
            )
        ),
    },
    "usage-dcgm-ingest": {  # hourly GPU activity per pod or Slurm job, from each cluster's Prometheus
        "task": "accounting.tasks.ingest_all_dcgm",
        "schedule": float(env_int("ALLOT_USAGE_DCGM_SECONDS", 900, help="How often beat reads DCGM activity.")),
    },
    "usage-rollup": {"task": "accounting.tasks.rollup_recent", "schedule": 3600.0},
    "fragmentation-sample": {"task": "accounting.tasks.sample_fragmentation", "schedule": 3600.0},
    "reviews-monthly": {  # last month's governance review of every organisation and department, on the 1st
        "task": "accounting.tasks.build_reviews",
        "schedule": crontab(minute=0, hour=3, day_of_month=1),
    },
    "findings-detect": {  # the detectors over the rollups; a finding that persists widens, never repeats
        "task": "accounting.tasks.detect_findings",
        "schedule": float(env_int("ALLOT_FINDINGS_SECONDS", 86400, help="How often beat runs the findings detectors.")),
    },
    "slurm-drift-check": {  # each check costs slurmdbd four reads
        "task": "quotas.tasks.drift_check",
        "schedule": float(
            env_int(
                "ALLOT_SLURM_DRIFT_CHECK_SECONDS",
                900,
                help="How often beat checks every Slurm cluster for drift (four sacctmgr reads each).",
            )
        ),
        "args": ("slurm",),
    },
}
