"""When a waiting job may start (accounting.policy.estimate, issue #44.3): a band, never a single time, and
the share of past jobs that started inside the band they would have been given."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from accounting.policy.estimate import MIN_BASIS, PastJob, calibrate, wait_band

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_the_band_is_the_comparable_waits_10th_to_90th_percentile_less_what_it_waited():
    waits = [60.0 * m for m in range(1, 21)]  # 1 … 20 min
    band = wait_band(waits, [], 0.0)
    assert band is not None and (band.after_s, band.by_s, band.basis, band.scope) == (120.0, 1080.0, 20, "unit")
    later = wait_band(waits, [], 600.0)  # waited 10 min: only the 11 that waited at least that long count
    assert later is not None and (later.after_s, later.by_s, later.basis) == (60.0, 540.0, 11)
    fallback = wait_band(waits[: MIN_BASIS - 1], waits, 0.0)
    assert fallback is not None and fallback.scope == "flavor"  # too few of its own: the flavor's
    assert wait_band(waits[:3], waits[:3], 0.0) is None  # too few anywhere: no band, not a guess


def test_calibration_replays_history_in_submission_order_without_looking_ahead():
    rng = random.Random(3)
    jobs = []
    for i in range(400):
        submitted = T0 + timedelta(minutes=10 * i)
        wait = timedelta(seconds=rng.expovariate(1 / 600))  # a steady queue: waits of 10 min on average
        jobs.append(PastJob(1, "west/a100", submitted, submitted + wait))
    found = calibrate(jobs, window_s=7 * 86400)
    assert found.jobs + found.without_band == 400 and found.without_band >= MIN_BASIS
    assert 0.7 <= (found.share_inside or 0) <= 0.9  # an 80 % band on a steady queue holds about 80 %
    # a queue that suddenly slows: bands from the calm past miss, and the calibration says so
    slow = [PastJob(1, "west/a100", j.submitted, j.submitted + 20 * (j.started - j.submitted)) for j in jobs[200:]]
    shifted = calibrate(jobs[:200] + slow, window_s=7 * 86400)
    assert (shifted.share_inside or 0) < 0.7 <= (found.share_inside or 0)
