"""The what-if and plan bars are drawn to scale (issue #42): 10,076 h → 22,969 h are two bars of
different lengths, in the ratio of their numbers, and no style caps a bar."""

from pathlib import Path

import pytest

from accounting.charts import BAR_ROOM, comparison_rows

BASE = Path(__file__).resolve().parents[2] / "templates" / "base.html"


def unit(path, queued, idle, queued_after, idle_after):
    side = lambda q, i: {"guarantee": 8, "queued_h": q, "idle_guarantee_h": i, "full_share": 0.5}
    return {
        "unit_path": path,
        "flavor": "a100",
        "today": side(queued, idle),
        "proposed": side(queued_after, idle_after),
    }


def test_bars_keep_the_ratio_of_their_numbers():
    rows = comparison_rows([unit("acme/nlp", 10_076, 300, 22_969, 40), unit("acme/vision", 500, 2_000, 400, 100)])
    nlp, vision = rows
    assert nlp["queued_pct"][1] == pytest.approx(BAR_ROOM)  # the largest value shown takes the whole room
    assert nlp["queued_pct"][1] / nlp["queued_pct"][0] == pytest.approx(22_969 / 10_076)
    assert vision["idle_pct"][0] / nlp["queued_pct"][1] == pytest.approx(2_000 / 22_969)
    assert 2 * BAR_ROOM < 100  # both bars of a row fit beside each other with room for their numbers


def test_no_style_caps_a_bar():
    css = BASE.read_text()
    rule = css.split(".whatif .bar, .swatch {", 1)[1].split("}", 1)[0]
    assert "max-width" not in rule
