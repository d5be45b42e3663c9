"""Celery: the policy check runs on a real worker process through the real Redis broker."""

import os
import subprocess
import sys
import time

import pytest
from django.db import connection

from config.celery import app
from quotas.tasks import policy_check

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker():
    """A real `celery worker` process on REDIS_URL, using the test database."""
    env = {**os.environ, "DATABASE_URL": _test_database_url(), "ALLOT_CELERY_EAGER": "false"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "--loglevel=warning",
            "-n",
            f"test-{os.getpid()}@%h",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=1):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {proc.stdout.read().decode() if proc.stdout else ''}")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _test_database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def test_policy_check_runs_on_a_real_worker(org, worker, settings):
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    try:
        result = policy_check.delay().get(timeout=60)
    finally:
        app.conf.task_always_eager = eager
    assert result == {"units": 6, "quotas": 6, "violations": 0}


def test_cluster_sync_runs_on_a_real_worker(demo, worker, crd_schemas):
    from quotas.models import SyncRun, SyncStatus
    from quotas.tasks import cluster_sync_task
    from tests.kube_fake import FakeKueueServer

    with FakeKueueServer(crd_schemas) as fake:
        demo.connection_ref = f"url:{fake.url}"
        demo.save()
        eager = app.conf.task_always_eager
        app.conf.task_always_eager = False
        try:
            result = cluster_sync_task.delay(demo.pk, "apply", "worker test").get(timeout=120)
        finally:
            app.conf.task_always_eager = eager
    assert result["status"] == SyncStatus.APPLIED and result["counts"] == {"created": 45}
    assert SyncRun.objects.get(pk=result["run"]).reason == "worker test"
    assert len(fake.writes()) == 45
