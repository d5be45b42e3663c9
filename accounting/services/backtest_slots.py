"""Backtests take turns: a replay of a month is seconds of CPU, so each person runs one at a time and the
whole instance at most ``ALLOT_BACKTESTS_AT_ONCE`` (issue #42: eight parallel backtests from one token
took 34–40 s each and a viewer's page 35.8 s). Slots live in the shared cache, so gunicorn's workers and
the web servers count together; a slot whose process died frees itself after ``SLOT_SECONDS``.

The API answers a refused turn with 429 and ``Retry-After``; the what-if panel says it is still
working on the previous numbers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.cache import cache

SLOT_SECONDS = 300
"""Longer than any backtest runs (bench: a 1,000-team month in well under a minute)."""


class BacktestBusy(Exception):
    """No turn now: ``str()`` says whose backtest holds it; ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@contextmanager
def backtest_turn(user_id: int | None) -> Iterator[None]:
    """Hold one of the instance's backtest slots and the reader's own, for the ``with`` block."""
    token = uuid.uuid4().hex
    mine = f"backtest:user:{user_id}"
    if not cache.add(mine, token, SLOT_SECONDS):
        raise BacktestBusy("a backtest of yours is still running: this one starts when it has finished", 5)
    held = None
    try:
        for slot in range(max(1, settings.ALLOT_BACKTESTS_AT_ONCE)):
            if cache.add(f"backtest:slot:{slot}", token, SLOT_SECONDS):
                held = f"backtest:slot:{slot}"
                break
        if held is None:
            raise BacktestBusy(
                f"{settings.ALLOT_BACKTESTS_AT_ONCE} backtests are running on this instance "
                "(ALLOT_BACKTESTS_AT_ONCE): try again in a few seconds",
                10,
            )
        yield
    finally:
        for key in (held, mine):
            if key is not None and cache.get(key) == token:  # never free a slot a later holder took
                cache.delete(key)
