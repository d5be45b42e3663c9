"""Consumption anomalies against the unit's own norm for the same hours of the week."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from accounting.policy.anomalies import ConsumptionWindow, consumption_anomalies
from accounting.policy.findings import FindingKind, Thresholds

END = datetime(2026, 11, 20, tzinfo=UTC)
START = END - timedelta(hours=24)
TH = Thresholds()


def window(allocated, weeks, active=None, weekly_active=()):
    return ConsumptionWindow(5, "acme/research/nlp", 9, "west/a100", allocated, active, tuple(weeks), weekly_active)


def test_three_times_the_norm_is_a_spike_with_the_question_to_ask():
    (found,) = consumption_anomalies([window(600, [190, 200, 210, 200])], TH, START, END)
    assert found.kind is FindingKind.CONSUMPTION_ANOMALY and found.key == "consumption_anomaly:spike:5:9"
    assert found.summary == (
        "nlp used 3.0× its usual west/a100 device-hours: 600 in 24 h against a norm of 200 for these hours of the week"
    )
    assert "runaway submission script, or an intended experiment?" in found.suggestion.lower()
    assert found.evidence["norm_devices"] == round(200 / 24, 2) and found.evidence["weeks"] == 4


def test_below_the_factor_small_or_without_a_norm_is_quiet():
    assert consumption_anomalies([window(590, [200, 200])], TH, START, END) == []  # 2.95×
    assert consumption_anomalies([window(28, [5, 5, 5])], TH, START, END) == []  # 5.6×, but only 23 device-hours above
    assert consumption_anomalies([window(900, [200])], TH, START, END) == []  # one week is not a norm
    (new,) = consumption_anomalies([window(48, [0, 0, 0])], TH, START, END)  # from nothing to 48
    assert "from nothing to" in new.summary


def test_activity_gone_while_the_devices_stay_held_is_a_drop():
    held = window(190, [200, 200, 200], active=2, weekly_active=(150, 160, 140))
    (found,) = consumption_anomalies([held], TH, START, END)
    assert found.key == "consumption_anomaly:drop:5:9" and found.evidence["signal"] == "drop"
    assert "dropped to 2 device-hours (usually 150) while it still holds 190" in found.summary
    released = window(20, [200, 200, 200], active=0, weekly_active=(150, 160, 140))  # it let go: no anomaly
    assert consumption_anomalies([released], TH, START, END) == []
    unmeasured = window(190, [200, 200, 200])
    assert consumption_anomalies([unmeasured], TH, START, END) == []


def test_bad_thresholds_are_named():
    from dataclasses import replace

    problems = replace(TH, anomaly_factor=1.0, anomaly_weeks=0).problems()
    assert any(p.startswith("anomaly_factor = 1.0") for p in problems)
    assert any(p.startswith("anomaly_weeks = 0") for p in problems)
