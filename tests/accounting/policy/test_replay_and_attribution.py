"""The replay format and the attribution rule: the numbers add up in every interval."""

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.policy.attribution import UnitInterval, attribute
from accounting.policy.replay import ReplayRow, parse_replay
from accounting.policy.sacct import LineProblem

NOW = datetime(2026, 12, 1, tzinfo=UTC)
HEADER = "minute,unit,flavor,quota,held,queued"


def test_rows_are_read_and_bad_ones_say_what_is_wrong():
    found = list(
        parse_replay(
            [
                HEADER,
                "2020-05-01T00:00,vc6YE,v100,208,162,0",
                "2020-05-01T00:01,vc6YE,v100,208,-1,0",
                "2020-05-01T00:02,vc6YE,v100,208,x,0",
                "yesterday,vc6YE,v100,208,1,0",
                "2030-01-01T00:00,vc6YE,v100,208,1,0",
                "2020-05-01T00:03,vc6YE,v100,208",
            ],
            now=NOW,
        )
    )
    assert found[0] == ReplayRow(datetime(2020, 5, 1, tzinfo=UTC), "vc6YE", "v100", 208, 162, 0)
    errors = [f.error for f in found[1:] if isinstance(f, LineProblem)]
    assert [e.split(":")[0] for e in errors] == [
        "quota, held and queued cannot be negative",
        "quota, held and queued must be whole numbers",
        "minute 'yesterday' is not ISO 8601 (2020-05-01T00",
        "minute 2030-01-01T00",
        "4 columns, expected 6",
    ]
    assert "clock skew" in errors[3]


def test_a_wrong_header_stops_at_line_one():
    (found,) = parse_replay(["time,vc,gpus", "2020-05-01T00:00,a,b"], now=NOW)
    assert isinstance(found, LineProblem) and found.line == 1 and HEADER in found.error


units = st.dictionaries(
    st.sampled_from("abcdef"),
    st.tuples(st.integers(0, 64), st.integers(0, 64), st.integers(0, 100)).map(
        lambda t: UnitInterval(guarantee=t[0], lendable=min(t[1], t[0]), held=t[2])
    ),
    min_size=1,
)


@settings(max_examples=500)
@given(units=units, spare=st.integers(0, 50))
def test_the_parts_add_up_in_every_interval(units, spare):
    physical = sum(u.guarantee for u in units.values()) + spare
    split = attribute(units, physical)
    held = sum(u.held for u in units.values())
    assert sum(s.within + s.borrowed for s in split.values()) == held
    assert sum(s.lent for s in split.values()) <= sum(s.borrowed for s in split.values()) + 1e-9
    for key, part in split.items():
        unit = units[key]
        assert 0 <= part.lent <= min(part.idle, unit.lendable) + 1e-9
        assert part.within + part.idle == unit.guarantee
    borrowed = sum(s.borrowed for s in split.values())
    lent = sum(s.lent for s in split.values())
    offered = sum(min(s.idle, units[k].lendable) for k, s in split.items())
    assert abs(lent - min(max(0, borrowed - spare), offered)) < 1e-6  # unguaranteed capacity is used first
