"""The usage version: a token that changes whenever usage rows are written, so a result computed from
the usage (the governance plan) can be cached under it without scanning the usage to learn whether it
changed.

Every writer of ``UsageHour`` or ``UsageSample`` rows (the rollup, the replay loader, the demo fleet)
calls ``usage_changed()``; anything else that writes them (a bench's fixture, a restore) must too. The
token lives in the shared cache beside what is cached under it: where it is missing (never set,
evicted, the cache emptied) a new one is drawn, so a lost token can only cost a recomputation, never
serve a stale result.
"""

from __future__ import annotations

from uuid import uuid4

from django.core.cache import cache
from django.db import transaction

KEY = "allot:usage:version"


def usage_version() -> str:
    """The current token (one cache read)."""
    found = cache.get(KEY)
    if found is None:
        cache.add(KEY, uuid4().hex, None)  # two processes drawing at once keep the first one's
        found = cache.get(KEY) or uuid4().hex
    return str(found)


def usage_changed() -> None:
    """Usage rows were written: a new token now, and another once the writing transaction commits
    (a process that read the old rows between the two cached them under the first, which nothing
    reads afterwards)."""
    cache.set(KEY, uuid4().hex, None)
    transaction.on_commit(lambda: cache.set(KEY, uuid4().hex, None))
