"""Enforcement across processes, the way production runs it: a real web process (gunicorn) takes
the edits, real Celery workers run the syncs, and the debounce marks and the
per-cluster lock live in the shared cache (Redis). With a per-process cache an edit made after a run
was never enforced, and two workers synced one cluster at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.db.models import F

from config.celery import app
from quotas.models import Cluster, Quota, SyncRun
from quotas.policy import Resource
from quotas.services import enforce
from tests.ports import free_port
from tests.quotas.test_celery_production import start_worker, stop
from tests.quotas.test_tasks import _test_database_url

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
REASON = "enforce the policy after a change"
ENFORCING = {"ALLOT_ENFORCE_ON_CHANGE": "true", "ALLOT_ENFORCE_DELAY_SECONDS": "3"}


def _web(port: int) -> subprocess.Popen[bytes]:
    """gunicorn as deploy/ runs it, one process (so which process takes an edit is not left to chance)."""
    env = {
        **os.environ,
        **ENFORCING,
        "DATABASE_URL": _test_database_url(),
        "ALLOT_CELERY_EAGER": "false",
        "ALLOT_DEBUG": "true",
        "ALLOT_ALLOWED_HOSTS": "127.0.0.1,localhost",
    }
    argv = [sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "config.wsgi"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
            return proc
        except OSError as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"web did not start: {proc.stdout.read().decode() if proc.stdout else ''}") from exc
            time.sleep(0.3)


def _patch(port: int, token: str, quota: Quota, guarantee: int) -> None:
    quota.refresh_from_db()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/quotas/{quota.pk}/",
        data=json.dumps({"guarantee": guarantee, "reason": f"edit to {guarantee}"}).encode(),
        method="PATCH",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json", "If-Match": quota.etag},
    )
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"PATCH {guarantee}: {exc.code} {exc.read().decode()}") from exc


def _runs(cluster: Cluster) -> list[SyncRun]:
    return list(SyncRun.objects.filter(cluster=cluster, reason=REASON).order_by("id"))


def _wait_for(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.5)


@pytest.fixture
def fleet(demo, crd_schemas):
    """The demo's Kubernetes cluster on a loopback API server whose writes take a second each (so a
    sync lasts long enough for a second one to overlap it, were that possible); the other clusters
    are disabled. Yields (cluster, token, a quota)."""
    from rest_framework.authtoken.models import Token

    from tests.kube_fake import FakeKueueServer

    class SlowServer(FakeKueueServer):
        def handle(self, method: str, raw_path: str, body: Any, auth: str | None) -> tuple[int, Any]:
            if method == "PATCH":
                time.sleep(0.05)
            return super().handle(method, raw_path, body, auth)

    cache.clear()
    with SlowServer(crd_schemas) as fake:
        demo.connection_ref = f"url:{fake.url}"
        demo.save()
        Cluster.objects.exclude(pk=demo.pk).update(enabled=False)
        from django.contrib.auth import get_user_model

        admin = get_user_model().objects.filter(is_staff=True).order_by("id")[0]
        token = Token.objects.create(user=admin).key
        quota = (  # a leaf's GPU guarantee: lowering it (above what it lends) is valid
            Quota.objects.filter(
                flavor__cluster=demo, resource=Resource.GPU.value, guarantee__gt=F("lendable") + 4, unit__children=None
            )
            .order_by("id")
            .first()
        )
        assert quota is not None
        yield demo, token, quota
    cache.clear()


def test_edits_in_a_web_process_are_enforced_by_a_worker_process_debounced_and_none_is_lost(fleet):
    cluster, token, quota = fleet
    port = free_port()
    web = _web(port)
    worker = start_worker(f"enforce-{os.getpid()}@%h", **ENFORCING)
    eager, app.conf.task_always_eager = app.conf.task_always_eager, False
    try:
        start = quota.guarantee
        for step in range(3):  # three edits inside the 3 s debounce window
            _patch(port, token, quota, start - 1 - step)
        _wait_for(lambda: len(_runs(cluster)) >= 1 and _runs(cluster)[0].finished_at, 90, "the first run")
        time.sleep(4)  # past the window: nothing else was queued by those three edits
        assert len(_runs(cluster)) == 1, "three edits in one window are one run"
        first = _runs(cluster)[0]
        latest = Quota.objects.get(pk=quota.pk)
        assert first.revision >= max(e.pk for e in _audit_of(quota)), "the run compiled the last of the three"
        _patch(port, token, quota, latest.guarantee - 1)  # after the run: must queue the next one
        _wait_for(lambda: len(_runs(cluster)) == 2 and _runs(cluster)[1].finished_at, 60, "the edit after the run")
        assert _runs(cluster)[1].revision >= max(e.pk for e in _audit_of(quota))
    finally:
        app.conf.task_always_eager = eager
        stop(worker)
        web.terminate()
        web.wait(timeout=30)


def _audit_of(quota: Quota) -> list[Any]:
    from quotas.models import AuditEvent

    return list(AuditEvent.objects.filter(action="quota_set", object_id=str(quota.pk)))


def test_two_workers_never_sync_one_cluster_at_once(fleet):
    cluster, _, _ = fleet
    from quotas.tasks import enforce_cluster

    # a lease far shorter than a run: only its renewal by the live run keeps the second worker out
    short = {**ENFORCING, "ALLOT_ENFORCE_LEASE_SECONDS": "2"}
    first = start_worker(f"race-a-{os.getpid()}@%h", **short)
    second = start_worker(f"race-b-{os.getpid()}@%h", **short)
    eager, app.conf.task_always_eager = app.conf.task_always_eager, False
    try:
        results = [enforce_cluster.delay(cluster.pk) for _ in range(2)]  # one per worker (prefetch 1)
        outcomes = [r.get(timeout=180) for r in results]
    finally:
        app.conf.task_always_eager = eager
        stop(first)
        stop(second)
    runs = _runs(cluster)
    assert len(runs) == 2 and all(o.get("run") for o in outcomes)
    a, b = runs
    assert a.finished_at is not None and b.started_at >= a.finished_at, "the second run waited for the first"


def test_a_lock_held_by_another_process_makes_the_run_wait(fleet):
    """The lock is the shared cache's: held here (another process, as far as the worker knows), the
    worker's run answers busy and retries; once it is released the run goes ahead."""
    cluster, _, _ = fleet
    from quotas.tasks import enforce_cluster

    worker = start_worker(f"held-{os.getpid()}@%h", **ENFORCING)
    key = enforce.RUNNING.format(cluster.pk)
    assert cache.add(key, "another-process", timeout=60)
    eager, app.conf.task_always_eager = app.conf.task_always_eager, False
    try:
        result = enforce_cluster.delay(cluster.pk)
        time.sleep(20)  # a run takes 5-10 s here: unlocked, it would have finished by now
        assert not result.ready() and _runs(cluster) == [], "it waits while another process holds the lock"
        released = threading.Timer(0, lambda: cache.delete(key))
        released.start()
        assert result.get(timeout=120).get("run")
    finally:
        app.conf.task_always_eager = eager
        cache.delete(key)
        stop(worker)
    assert len(_runs(cluster)) == 1


def test_enforcement_without_a_shared_cache_refuses_to_start():
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ALLOT_CACHE_URL")}
    env.update(ALLOT_ENFORCE_ON_CHANGE="true", DJANGO_SETTINGS_MODULE="config.settings")
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "no shared cache is configured" in done.stderr and "REDIS_URL" in done.stderr


def test_a_worker_killed_mid_enforcement_frees_its_cluster_and_the_edits_meanwhile_are_enforced(
    demo, crd_schemas, settings
):
    """Issue #41: a worker killed while enforcing (an OOM kill) left its cluster's lock held for
    ALLOT_ENFORCE_LOCK_SECONDS (15 minutes): the runs queued by later edits answered busy, gave up after
    their retries, and the edits stayed unenforced. Now the lock is a lease its live holder renews; the
    killed worker's lapses, and the edit made meanwhile is enforced soon after a worker is back."""
    from django.contrib.auth import get_user_model

    from quotas import services
    from quotas.tasks import enforce_cluster
    from tests.kube_fake import StallingServer

    cache.clear()
    with StallingServer(crd_schemas) as fake:  # holds the first real write: the worker dies meanwhile
        reached, gate = fake.reached, fake.gate
        demo.connection_ref = f"url:{fake.url}"
        demo.save()
        Cluster.objects.exclude(pk=demo.pk).update(enabled=False)
        first = start_worker(f"killed-{os.getpid()}@%h", **ENFORCING)
        eager, app.conf.task_always_eager = app.conf.task_always_eager, False
        try:
            enforce_cluster.delay(demo.pk)
            assert reached.wait(120), "the run never reached its first write"
            assert cache.get(enforce.RUNNING.format(demo.pk)), "the run holds its cluster's lock"
            os.killpg(first.pid, signal.SIGKILL)  # no chance to release the lock
            first.wait(timeout=30)
            gate.set()
            # an edit while no worker runs: the web process queues its enforcement as usual
            settings.ALLOT_ENFORCE_ON_CHANGE, settings.ALLOT_ENFORCE_DELAY_SECONDS = True, 3
            quota = (
                Quota.objects.filter(flavor__cluster=demo, resource=Resource.GPU.value,
                                     guarantee__gt=F("lendable") + 4, unit__children=None)
                .order_by("id").first()
            )  # fmt: skip
            assert quota is not None
            admin = get_user_model().objects.filter(is_staff=True).order_by("id")[0]
            services.quota_set(
                actor=admin, reason="edit while the worker is down", unit_id=quota.unit_id, flavor_id=quota.flavor_id,
                resource=Resource.GPU, guarantee=quota.guarantee - 1,
            )  # fmt: skip
            edit = max(e.pk for e in _audit_of(quota))
            second = start_worker(f"back-{os.getpid()}@%h", **ENFORCING)
            back = time.monotonic()
            try:
                # a minute, plus the killed run's lease running out (it was 15 minutes: the lock's whole life)
                _wait_for(
                    lambda: any(r.finished_at and r.revision >= edit for r in _runs(demo)),
                    60 + 30,
                    "a run covering the edit made while the worker was down",
                )
                print(f"the edit was enforced {time.monotonic() - back:.1f} s after a worker was back")
            finally:
                stop(second)
        finally:
            app.conf.task_always_eager = eager
            gate.set()
            stop(first)
    assert cache.get(enforce.RUNNING.format(demo.pk)) is None  # and the lock is free again
