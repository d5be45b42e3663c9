"""A change made on a past day: its audit rows carry that day. The audit trail is append-only (a
PostgreSQL trigger too), so a test cannot backdate a row afterwards; what a closed month reads as in
force at its end (quotas/history.py) is set up by making the change "then"."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from unittest import mock


@contextmanager
def made_on(at: datetime) -> Iterator[None]:
    with mock.patch("django.utils.timezone.now", return_value=at):
        yield
