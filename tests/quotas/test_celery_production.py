"""Celery in production: a worker killed mid-task loses and doubles nothing (acks late, requeued,
idempotent tasks), beat runs once (a Redis lock), and what beat sent is shown on the Clusters page.
Real worker processes on the real Redis broker and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.test import Client

from config.celery import app
from tests.quotas.test_tasks import _test_database_url

REDIS = pytest.mark.redis


def start_worker(name: str, **env: str) -> subprocess.Popen[bytes]:
    """A real `celery worker` (solo pool: the task runs in the process we kill) on REDIS_URL."""
    environment = {**os.environ, "DATABASE_URL": _test_database_url(), "ALLOT_CELERY_EAGER": "false", **env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "--loglevel=warning", "-n", name],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not app.control.ping(destination=[name.replace("%h", os.uname().nodename)], timeout=1):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker did not start: {proc.stdout.read().decode() if proc.stdout else ''}")
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@REDIS
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_sync_neither_loses_nor_doubles_it(demo, crd_schemas):
    from quotas.models import AuditEvent, SyncRun, SyncStatus
    from quotas.tasks import cluster_sync_task
    from tests.kube_fake import StallingServer

    # the broker hands an unacknowledged task to another worker after the visibility timeout
    timing = {
        "ALLOT_CELERY_VISIBILITY_TIMEOUT": "20",
        "ALLOT_CELERY_TIME_LIMIT": "15",
        "ALLOT_CELERY_SOFT_TIME_LIMIT": "12",
    }
    with StallingServer(crd_schemas, after=9) as fake:  # holds the 10th real write: the worker dies meanwhile
        reached, gate = fake.reached, fake.gate
        demo.connection_ref = f"url:{fake.url}"
        demo.save()
        first = start_worker(f"first-{os.getpid()}@%h", **timing)
        eager, app.conf.task_always_eager = app.conf.task_always_eager, False
        try:
            result = cluster_sync_task.delay(demo.pk, "apply", "kill test")
            assert reached.wait(120), "the sync never reached its 10th write"
            os.killpg(first.pid, signal.SIGKILL)  # an OOM kill: no chance to acknowledge or clean up
            first.wait(timeout=30)
            gate.set()
            assert SyncRun.objects.filter(reason="kill test").count() == 0  # nothing half-recorded
            second = start_worker(f"second-{os.getpid()}@%h", **timing)
            try:
                outcome = result.get(timeout=180)
            finally:
                stop(second)
        finally:
            app.conf.task_always_eager = eager
            stop(first)
    runs = SyncRun.objects.filter(reason="kill test")
    assert runs.count() == 1, "the sync ran to completion exactly once"
    run = runs.get()
    assert run.status == SyncStatus.APPLIED and outcome["run"] == run.pk
    assert sum(run.counts.values()) == 45 and run.counts.get("created", 0) + run.counts.get("unchanged", 0) == 45
    assert len(fake.objects) == 45  # every object once
    assert AuditEvent.objects.filter(action="cluster_sync", reason="kill test").count() == 1


@REDIS
def test_only_one_beat_holds_the_lock_and_a_lost_lock_is_noticed(settings):
    from config.beat import LOCK_KEY, Lock

    first = Lock(settings.REDIS_URL, 30, "host-a:1")
    second = Lock(settings.REDIS_URL, 30, "host-b:2")
    first.client.delete(LOCK_KEY)
    try:
        assert first.acquire(wait=False) is True
        assert second.acquire(wait=False) is False  # a second beat waits
        assert first.client.eval(Lock.RENEW, 1, LOCK_KEY, first.me, 30) == 1  # the holder renews
        assert second.client.eval(Lock.RENEW, 1, LOCK_KEY, second.me, 30) == 0  # the other cannot
        first.client.set(LOCK_KEY, "host-b:2")  # taken over (e.g. after an expiry)
        assert first.client.eval(Lock.RENEW, 1, LOCK_KEY, first.me, 30) == 0  # the old holder notices
    finally:
        first.client.delete(LOCK_KEY)


@REDIS
def test_beat_check_says_whether_this_host_holds_the_lock(settings):
    import socket

    from config.beat import LOCK_KEY, Lock, main

    lock = Lock(settings.REDIS_URL, 30, f"{socket.gethostname()}:{os.getpid()}")
    lock.client.delete(LOCK_KEY)
    try:
        assert main(["--check"]) == 1
        lock.acquire(wait=False)
        assert main(["--check"]) == 0
    finally:
        lock.client.delete(LOCK_KEY)


@pytest.mark.django_db
def test_the_clusters_page_shows_what_beat_ran_and_when_it_runs_next(demo, admin_client: Client):
    from datetime import timedelta

    from django.utils import timezone

    from quotas.models import BeatRun
    from quotas.services.schedule import beat_run_record

    beat_run_record(name="kueue-drift-check", task="quotas.tasks.drift_check")
    beat_run_record(name="kueue-drift-check", task="quotas.tasks.drift_check")
    run = BeatRun.objects.get(name="kueue-drift-check")
    assert run.run_count == 2
    BeatRun.objects.filter(pk=run.pk).update(last_run_at=timezone.now() - timedelta(hours=3))
    page = admin_client.get("/clusters/").content.decode()
    assert "Periodic work" in page and "quotas.tasks.drift_check(kubernetes)" in page
    assert "(2 runs)" in page and "overdue: is beat running?" in page  # every 5 min, last 3 h ago
    assert "policy-check-hourly" in page and "at beat's next start" in page  # never sent yet
