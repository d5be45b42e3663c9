"""Celery beat as a singleton: ``python -m config.beat`` (the container's ``beat`` role).

Two beats would send every periodic task twice, so beat first takes a lock in Redis (SET NX with an
expiry, ALLOT_BEAT_LOCK_SECONDS) and renews it at a third of that; a second beat waits for the lock,
and a beat that loses it (Redis unreachable for longer than the expiry, or the lock taken over)
exits, so its pod restarts and waits again. Each entry it sends is recorded (``BeatRun``: last run,
run count), which the portal's Clusters page shows with the next run.

    python -m config.beat [--loglevel INFO]   run beat once the lock is held
    python -m config.beat --check             exit 0 when this host holds the lock (the healthcheck)
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from celery.beat import PersistentScheduler, ScheduleEntry  # noqa: E402
from django.conf import settings  # noqa: E402

from config.celery import app  # noqa: E402

log = logging.getLogger("allot.beat")
LOCK_KEY = "allot:beat:lock"


def holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class RecordingScheduler(PersistentScheduler):
    """Celery's own scheduler; every entry it sends is recorded for the portal."""

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        super().apply_entry(entry, producer=producer)
        from quotas.services.schedule import beat_run_record

        try:
            beat_run_record(name=entry.name, task=entry.task)
        except Exception:  # the schedule goes on even when the record cannot be written
            log.exception("could not record beat entry %s", entry.name)


class Lock:
    """The beat lock in Redis: acquired with SET NX EX, renewed only while still ours."""

    RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"

    def __init__(self, url: str, seconds: int, me: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        self.seconds, self.me = seconds, me
        self.lost = threading.Event()

    def acquire(self, *, wait: bool = True) -> bool:
        while True:
            if self.client.set(LOCK_KEY, self.me, nx=True, ex=self.seconds):
                return True
            if not wait:
                return False
            log.info("another beat holds the lock (%s); waiting", self.client.get(LOCK_KEY))
            time.sleep(max(1.0, self.seconds / 3))

    def renew_forever(self) -> None:
        while not self.lost.wait(self.seconds / 3):
            try:
                if not self.client.eval(self.RENEW, 1, LOCK_KEY, self.me, self.seconds):
                    log.error("the beat lock was taken over; stopping so only one beat runs")
                    self.lost.set()
            except Exception:
                log.exception("could not renew the beat lock")
        os._exit(3)  # a beat without the lock must not send anything more


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run Celery beat as a singleton (Redis lock).")
    parser.add_argument("--check", action="store_true", help="exit 0 when a beat on this host holds the lock")
    parser.add_argument("--loglevel", default="INFO")
    parser.add_argument("--schedule", default=str(settings.VAR_DIR / "celerybeat-schedule"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    url = settings.REDIS_URL
    if not url:
        print("REDIS_URL is not set: without a broker, tasks run in-process and beat is not needed", file=sys.stderr)
        return 2
    if args.check:
        import redis

        raw = redis.Redis.from_url(url).get(LOCK_KEY)
        owner = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        return 0 if owner.startswith(socket.gethostname() + ":") else 1
    lock = Lock(url, settings.ALLOT_BEAT_LOCK_SECONDS, holder())
    lock.acquire()
    log.info("beat lock held by %s; starting beat", lock.me)
    threading.Thread(target=lock.renew_forever, name="beat-lock", daemon=True).start()
    app.Beat(scheduler=RecordingScheduler, schedule=args.schedule, loglevel=args.loglevel.upper()).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
